"""A stand-in for a supervisor's child: a small Python process that speaks the child's
protocol (:mod:`queuey_core.process.supervised`) without a broker."""

from __future__ import annotations

#: A stand-in child: says ready, asks for a replacement or dies as FAKE_PLAN says for its
#: slot, drains on SIGTERM (exit 0), and stops at once (130) on a second one.
FAKE_CHILD = r"""
import json, os, signal, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--supervised-fd") + 1]))
index = os.environ["QUEUEY_CHILD_INDEX"]
log = open(os.environ["FAKE_LOG"], "a")
import threading
terms = []
def term(signum, frame):
    terms.append(signum)
    if len(terms) > 1:
        os._exit(130)
signal.signal(signal.SIGTERM, term)
def requests():  # the supervisor asks over the socket: drain, then stop at once
    buffer = b""
    while True:
        data = sock.recv(4096)
        if not data:
            return
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            event = json.loads(line)["event"]
            log.write(f"asked {event} {index} {os.getpid()}\n"); log.flush()
            if event == "stop":
                os._exit(130)
            terms.append(event)
threading.Thread(target=requests, daemon=True).start()
def say(event, **fields):
    sock.sendall((json.dumps({"event": event, **fields}) + "\n").encode())
log.write(f"start {index} {os.getpid()}\n"); log.flush()
plan = os.environ.get("FAKE_PLAN_" + index, "")
marker = os.environ["FAKE_LOG"] + ".once." + index
first = not os.path.exists(marker)
open(marker, "a").close()
if plan == "crash" and first:
    os._exit(3)
if plan == "refuse":  # as a worker does with a broker it cannot reach
    os._exit(1)
if plan == "burst":  # its queues were empty: it ends on its own, exit 0
    say("ready")
    log.write(f"drained {index} {os.getpid()}\n"); log.flush()
    sys.exit(0)
log.write(f"ready {index} {os.getpid()}\n"); log.flush()
say("ready")
if plan == "recycle" and first:
    say("recycle", jobs=5)
if plan == "stop":  # as `queuey workers shutdown` makes a child do
    say("stop")
    log.write(f"drained {index} {os.getpid()}\n"); log.flush()
    sys.exit(0)
while not terms:
    time.sleep(0.01)
say("draining")
if os.environ.get("FAKE_SLOW_DRAIN"):
    time.sleep(60)
log.write(f"drained {index} {os.getpid()}\n"); log.flush()
sys.exit(0)
"""
