#!/usr/bin/env bash
# Live sessions across nodes (serve --redis): registry, proxied offers and session requests,
# redirects, nodes stopped and killed, Redis gone (tests/api/fleet_test.py; it starts its own
# redis-server and three nodes).
# usage: e2e_fleet.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/fleet_test.py" "$1"
