"""scripts/results_table.py --amend: blocks of one GPU's section replaced or appended, the rest
of the file as it was (no GPU needed)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "results_table.py"

OLD = """# Results

<!-- gpu: GPU A -->
## GPU A

Measured 2026-01-01 at commit aaa. Device-to-device copy: 3000 GB/s.

### add

| dtype | shape | time (us) |
|---|---|---:|
| float32 | n=1 | 1.00 |

### Decode

old decode table

<!-- gpu: GPU B -->
## GPU B

Measured 2026-01-02 at commit bbb.

### add

b's rows
"""


def test_amend_replaces_and_appends_blocks(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text(OLD)
    extra = tmp_path / "decode.md"
    extra.write_text("### Decode\n\nnew decode table\n")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"copy": {"gbps": 3010.0}, "results": [
        {"op": "kmeans", "dtype": "float32", "dims": {"n": 8, "precision": 1},
         "time_us": {"median": 12.5}, "tflops": 1.5, "pct_of_gemm": 2.0, "launch": "k:x"},
        {"op": "merge", "dtype": "float16", "dims": {"rows": 2},
         "time_us": {"median": 3.0}, "gbps": 10.0, "pct_of_copy": 0.5}]}))
    subprocess.run([sys.executable, str(SCRIPT), "--device", "GPU A", "--amend", "--results",
                    str(results), "--extra", str(extra), "--table",
                    f" (float32)={bench}@ccc@2026-01-03"], check=True)
    text = results.read_text()
    a, b = text.split("<!-- gpu: GPU B -->")
    assert "new decode table" in a and "old decode table" not in a
    assert (a.index("### add") < a.index("### Decode") < a.index("### kmeans (float32)") <
            a.index("### merge (float32)"))
    assert "| float16 | rows=2 | 3.00 | 10 | 0.5% | - |" in a
    assert "Measured 2026-01-03 at commit ccc (device-to-device copy in that run: 3010 GB/s)" in a
    assert "| float32 | n=8 precision=1 | 12.50 | 1.5 | 2.0% | k |" in a
    assert "Measured 2026-01-01 at commit aaa" in a and "| float32 | n=1 | 1.00 |" in a
    assert b.strip().endswith("b's rows")


def test_amend_needs_the_section(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text(OLD)
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "GPU C", "--amend",
                          "--results", str(results)], capture_output=True, text=True)
    assert run.returncode != 0 and "no section of GPU C" in run.stderr
    assert results.read_text() == OLD
