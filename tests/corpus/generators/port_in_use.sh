#!/usr/bin/env bash
# Reproduces torchrun failing because its rendezvous port is already taken
# (EADDRINUSE: "The server socket has failed to listen on any local network
# address"), e.g. a previous job on the node still holds MASTER_PORT.
# A stand-in "previous job" listens on the port for the duration.
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=${PORT:-29561}
python -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', $PORT)); s.listen(); time.sleep(60)" &
HOLDER=$!
sleep 1
torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$PORT" "$HERE/train_tiny.py" --steps 50
rc=$?
kill "$HOLDER" 2>/dev/null
wait "$HOLDER" 2>/dev/null
exit $rc
