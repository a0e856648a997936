"""cudaops.torch across ranks: the slicing helpers (no GPU needed), then on one GPU two
processes of torch.distributed's gloo backend run examples/python/context_parallel.py end to end
(context parallel with the exact merge, and heads across ranks), each checked against dense
attention in float64, each rank's index saved and reloaded."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import requires_gpu

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cudaops.torch")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / \
    "context_parallel.py"


def test_slices_cover_the_cache_once():
    cache = torch.arange(4 * 10 * 2).reshape(4, 10, 2)
    parts = [ct.context_parallel_slice(cache, r, 3) for r in range(3)]
    assert [p.shape[1] for p in parts] == [3, 3, 4]
    assert torch.equal(torch.cat(parts, 1), cache) and all(p.is_contiguous() for p in parts)
    heads = [ct.head_slice(cache, r, 2) for r in range(2)]
    assert torch.equal(torch.cat(heads, 0), cache)
    with pytest.raises(ValueError, match=r"4 heads do not split evenly over 3 ranks"):
        ct.head_slice(cache, 0, 3)
    with pytest.raises(ValueError, match=r"rank 2"):
        ct.context_parallel_slice(cache, 2, 2)


@requires_gpu
@pytest.mark.parametrize("mode", ["context", "heads"])
def test_two_ranks_on_one_gpu_with_gloo(mode, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", str(EXAMPLE), "--mode", mode, "--backend", "gloo",
               "--tokens", "8192", "--check", "--save", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "check: ok" in run.stdout, run.stdout
    assert len(list(tmp_path.glob("index.rank*-of-2.ivf"))) == 2
