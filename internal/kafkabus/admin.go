package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// PingTimeout bounds Ping when ctx has no earlier deadline.
const PingTimeout = 2 * time.Second

// Ping reports whether one of brokers answers the Kafka protocol (a TCP dial
// and an ApiVersions request), for /readyz. The error names the addresses.
func Ping(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("ping kafka: no brokers")
	}
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var errs []error
	for _, addr := range brokers {
		err := pingOne(ctx, addr)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("ping kafka brokers %s: %w", strings.Join(brokers, ","), errors.Join(errs...))
}

func pingOne(ctx context.Context, addr string) error {
	conn, err := (&kafka.Dialer{ClientID: defaultClientID}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	_, err = conn.ApiVersions()
	return err
}
