#!/usr/bin/env bash
# The web experiment's server: Debian's nginx with one worker, access log off,
# serving a 512 B page and a 1 MiB file on 127.0.0.1:18781, from a state
# folder of its own. Usage: nginx.sh start|stop
set -euo pipefail
state=/tmp/kansoku-exp-web
port=18781
case "$1" in
  start)
    command -v nginx >/dev/null || { echo "nginx is not installed: apt-get install nginx (scripts/deps.sh bench)" >&2; exit 1; }
    rm -rf "$state"; mkdir -p "$state/www"
    head -c 512 /dev/zero | tr '\0' k > "$state/www/small.html"
    head -c 1048576 /dev/zero | tr '\0' k > "$state/www/large.bin"
    cat > "$state/nginx.conf" <<CONF
user root;
worker_processes 1;
pid $state/nginx.pid;
error_log $state/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $state/body; proxy_temp_path $state/proxy; fastcgi_temp_path $state/fcgi;
  uwsgi_temp_path $state/uwsgi; scgi_temp_path $state/scgi;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$port; listen 127.0.0.1:18782 http2; root $state/www; }
}
CONF
    # nginx returns once its listening sockets are open (it binds them
    # before it daemonises): one request tells that it serves the page.
    nginx -c "$state/nginx.conf" -p "$state"
    curl -sf --max-time 10 -o /dev/null "http://127.0.0.1:$port/small.html" \
      || { echo "nginx did not answer on $port (see $state/error.log)" >&2; exit 1; } ;;
  stop)
    [ -f "$state/nginx.pid" ] && kill "$(cat "$state/nginx.pid")" || true ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
