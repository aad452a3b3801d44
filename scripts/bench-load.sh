#!/usr/bin/env bash
# `kansoku lab load` beside wrk and ab on the same nginx (the web
# experiment's, experiments/web/nginx.sh: one worker, access log off): a
# 512 B page with keep-alive on and off, one thread and all cores, an
# open-loop run, then HTTP/2 with one and eight streams a connection
# beside h2load. Usage: scripts/bench-load.sh path/to/kansoku [seconds]
set -euo pipefail
bin="$1"; secs="${2:-5}"
web="$(dirname "$0")/../experiments/web/nginx.sh"
"$web" start
trap '"$web" stop' EXIT
url="http://127.0.0.1:18781/small.html"
"$bin" lab load "$url" -c 16 -t 1 -d "${secs}s" --peers wrk,ab
"$bin" lab load "$url" -c 16 -d "${secs}s" --peers wrk,ab
"$bin" lab load "$url" -c 4 -t 1 -d "${secs}s" --no-keepalive --peers wrk,ab
"$bin" lab load "$url" -c 16 -d "${secs}s" -R 20000
h2="http://127.0.0.1:18782/small.html"
"$bin" lab load "$h2" -c 4 -t 1 -d "${secs}s" --http2 --peers h2load
"$bin" lab load "$h2" -c 4 -t 1 -d "${secs}s" --http2 --streams 8 --peers h2load
