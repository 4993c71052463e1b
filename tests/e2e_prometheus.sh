#!/usr/bin/env bash
# Monitoring: Debian's prometheus scrapes `facecast serve` with the shipped scrape config and
# the Grafana dashboard's queries are checked against it (tests/api/prom_test.py).
# usage: e2e_prometheus.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/prom_test.py" "$1"
