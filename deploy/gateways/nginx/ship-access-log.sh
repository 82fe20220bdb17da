#!/usr/bin/env bash
# Ships nginx's JSON access log (access-log.conf) to Kafka, one line a
# message, for the detector's ACCESS_LOG_TOPIC. Needs kcat (Debian: kcat).
#
#   KAFKA_BROKERS     comma-separated host:port, as the services' (required)
#   ACCESS_LOG_TOPIC  the topic, as the detector's (required)
#   ACCESS_LOG        the log file (default /var/log/nginx/ratewarden.json)
#
# tail -F follows the file by name, through logrotate's renames, reading a
# new file from its start. -n 0 starts at the end: lines written while the
# shipper was down are lost, where tail's default would send the last 10
# again, counted twice (an outcome's id is its topic, partition and offset).
# Where a line must reach the detector once, use a shipper that keeps its
# place in the file (Vector's file source, Fluent Bit's tail with a DB).
#
# kcat (1.7) reads its input 1 KiB at a time: a line leaves once about a
# kilobyte more is logged, three or four requests later. Outcomes carry the
# time nginx logged them, and the detector's windows run on that time, so a
# late line counts in the right window; only the ban comes that much later.
# On a quiet gateway a load balancer's health check through a logged
# location keeps lines moving.
#
# internal/accesslog/nginx_test.go runs this script as it is.
set -euo pipefail
tail -n 0 -F "${ACCESS_LOG:-/var/log/nginx/ratewarden.json}" | kcat -P -b "$KAFKA_BROKERS" -t "$ACCESS_LOG_TOPIC"
