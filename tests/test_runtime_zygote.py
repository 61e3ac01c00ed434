"""The runtime zygote (lowering/runtime_zygote.py, issue 32 point 1): the process forked before
torch runs, whose children run the ExecuTorch runtime. In a fresh interpreter, with torch alone
(no ExecuTorch): a child forked after the parent started GNU OpenMP's thread pool runs parallel
ATen ops, a crash and a hang are its status, and the zygote serves on after them."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import RUN_DEADLINE

SCRIPT = """
import json, os, signal, sys, torch
from lowerd.lowering.runtime_zygote import start_zygote, stop_zygote
from lowerd.project.process_threads import thread_count

def serve(request, threaded):
    if request == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if request == b"hang":
        signal.pause()
    # 4 Mi elements: a parallel op, which waited for ever in a fork of a process whose OpenMP
    # pool had started.
    total = float(torch.ones(1 << 22).add(1).sum())
    forked_from = len(os.listdir(f"/proc/{os.getppid()}/task"))  # the zygote, waiting on us
    answer = {"threaded": threaded, "total": total, "forked_from": forked_from}
    return json.dumps(answer).encode()

zygote = start_zygote(serve)
torch.ones(1 << 22).add_(1)  # this process's OpenMP pool starts
found = {"pool": thread_count(), "intra_op": torch.get_num_threads()}
ran = zygote.run(b"run", timeout=float(sys.argv[1]))
found["run"] = json.loads(ran.answer) if ran is not None and ran.status == 0 else None
found["crash"] = zygote.run(b"crash", timeout=float(sys.argv[1])).status
found["hang"] = zygote.run(b"hang", timeout=0.0)  # not ended at once: killed, None
again = zygote.run(b"run", timeout=float(sys.argv[1]))
found["again"] = again.status if again is not None else None
stop_zygote()
found["zygote_reaped"] = not os.path.exists(f"/proc/{zygote.pid}")
print(json.dumps(found))
"""


def test_a_zygotes_child_runs_parallel_aten_after_its_parent_started_openmp() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(RUN_DEADLINE)],
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.splitlines()[-1])
    # The parent has OpenMP's threads (one core: none), its zygote none: the child inherited
    # no pool and ran its own, on every core (not the one-thread workaround).
    assert found["pool"] > 1 or found["intra_op"] == 1, found
    assert found["run"] == {"threaded": False, "total": 2.0 * (1 << 22), "forked_from": 1}
    assert found["crash"] == -11  # SIGSEGV: the status, the zygote still serving
    assert found["hang"] is None
    assert found["again"] == 0
    assert found["zygote_reaped"]
