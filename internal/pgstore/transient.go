package pgstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// isTransient reports whether err is worth retrying with the same batch:
// the server is unreachable, restarting, overloaded or a standby, the
// connection broke, a deadline passed, or the transaction lost a
// serialization or deadlock race. Constraint, data and syntax errors, a bad
// password, a missing database and a cancelled context are not: retrying
// cannot help them.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientCode(pgErr.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	for _, target := range [...]error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true // any other network failure: dial, read, write, DNS
	}
	// pgconn reports a connection that died under it as "conn closed".
	return strings.Contains(err.Error(), "conn closed")
}

func transientCode(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available (lock_timeout)
		"57014", // query_canceled (statement_timeout)
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now (starting up, recovering)
		"25006": // read_only_sql_transaction (a standby during failover)
		return true
	}
	if len(code) < 2 {
		return false
	}
	switch code[:2] {
	case "08", // connection_exception
		"53": // insufficient_resources: too_many_connections, disk_full, out_of_memory
		return true
	}
	return false
}
