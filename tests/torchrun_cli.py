"""A recipe under the real `torchrun` CLI, as README tells readers to run it: what rank 0 printed."""
import json
import os
import subprocess
import sys


def torchrun_json(nprocs: int, recipe: str, *args: str, timeout: float = 180) -> dict:
    """Run ``torchrun --standalone --nproc-per-node N -m helpers.run RECIPE ARGS`` (offline data) and
    return the JSON summary rank 0 printed; fail with the ranks' stderr if torchrun did."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run([torchrun, "--standalone", "--nproc-per-node", str(nprocs), "-m", "helpers.run",
                          recipe, *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "HELPERS_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout[out.stdout.index("{"):])
