#!/bin/sh
# gsrun.sh BUILD LABEL TRACE [extra mbbench args]: vsrun.sh with grow, the idle bytes at the peak
STRATEGY=grow exec "$(dirname "$0")/vsrun.sh" "$@"
