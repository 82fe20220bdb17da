package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// RouteLogs sends go-redis's own log lines (pool dial failures and the like)
// to log at debug level: failures that matter already surface as decision
// errors, counted and logged by the limiter.
func RouteLogs(log *zap.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	if ce := l.log.Check(zap.DebugLevel, "go-redis"); ce != nil {
		ce.Write(zap.String("msg", fmt.Sprintf(format, v...)))
	}
}
