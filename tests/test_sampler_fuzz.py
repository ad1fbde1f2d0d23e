"""A few fixed cases of the differential fuzz (tests/fuzz_sampler.py): random batches over
every setting, the Triton backend under the interpreter against the torch backend. The
script runs in a subprocess so that TRITON_INTERPRET never leaks into this process; longer
runs are `python tests/fuzz_sampler.py --minutes N`. Cases 20-35: three of them (24, 33, 34)
differ when the kernels' top-k bound is loosened by 0.5 in `_keep` (checked by hand), so
this selection can fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _fuzz(*args: str, timeout: int, interpret: bool = True,
          **env: str) -> subprocess.CompletedProcess:
    """The fuzz script with these arguments and extra environment: under the interpreter with
    no GPU in sight, or (`interpret=False`) on the GPU machine as it is."""
    cpu = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""} if interpret else {}
    env = {**os.environ, **cpu, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_sampler.py"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_fuzz_cases_equal_torch() -> None:
    proc = _fuzz("--start", "20", "--count", "16", "--minutes", "60", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "16 cases, 0 differ" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.slow
def test_fuzz_vocabs_and_rows_options() -> None:
    """`--vocabs` and `--rows` (the GPU fuzz's larger batches) reach the cases: case 0 draws
    a batch of 14 requests over V = 300, run here in chunks of 5, 5 and 4."""
    proc = _fuzz("--start", "0", "--count", "2", "--vocabs", "37", "300", "--rows", "16",
                 timeout=600, SONICSPEC_CHUNKS="5")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "case 0: sample V=300 B=14 " in proc.stdout, proc.stdout
    assert "case 1: verify V=37 " in proc.stdout, proc.stdout
    assert "2 cases, 0 differ" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_fuzz_ulp_groups_option() -> None:
    """`--ulp-groups` reaches the cases (cases 19 and 20 draw one, in float32 logits: one ulp
    apart, the probability ties of top-p that tests/test_sampler_triton.py's `_top_p_tie`
    pins)."""
    proc = _fuzz("--start", "19", "--count", "2", "--vocabs", "37", "300", "--rows", "16",
                 "--ulp-groups", timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "case 19: verify V=37 B=4 K=2 sparse torch.float32 ulp-group: equal" in proc.stdout
    assert "case 20: sample V=37 B=9 torch.float32 ulp-group: equal" in proc.stdout
    assert "2 cases, 0 differ" in proc.stdout, proc.stdout


def test_interpreter_weights_tie_like_torch() -> None:
    """CPU fuzz case 30877 (`--ulp-groups`, row 3: top-p 0.5 crosses among 388 tokens of one
    weight, 64 more one ulp below it): the interpreter's NumPy exp put the 64 on the
    threshold's weight, kept 987 tokens instead of 923 and drew 67 for torch's 70; with
    `_triton_interpret`'s torch exp the weights, and the tokens, are torch's."""
    proc = _fuzz("--case", "30877", "--ulp-groups", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sample V=1500 B=7 torch.float32 ulp-group equal" in proc.stdout, proc.stdout


def test_explain_tells_a_rounding_tie_from_a_mismatch() -> None:
    """`--explain` on the GPU fuzz's case 43016 (run 217: two rows differed): row 17's kept
    set moves when the normaliser moves by an ulp (a tie of the torch backend itself, which
    gives that row different tokens on the CPU and on CUDA); row 25's does not (it was the
    slow path's mismatch, fixed since). The torch backend alone, on the CPU."""
    big = ["--rows", "64", "--vocabs", "131073", "151936", "200003", "262144", "--cmax", "32"]
    tie = _fuzz("--case", "43016", *big, "--explain", "17", "0", timeout=300)
    assert tie.returncode == 0, tie.stderr[-3000:]
    assert "top_p 0.899999976" in tie.stdout and "(a float32 rounding tie)" in tie.stdout
    real = _fuzz("--case", "43016", *big, "--explain", "25", "0", timeout=300)
    assert real.returncode == 0, real.stderr[-3000:]
    assert "kept 221900:" in real.stdout and "rounding tie" not in real.stdout, real.stdout


def test_explain_takes_the_backends_normaliser() -> None:
    """GPU fuzz case 300002 (run 243, V = 262144, B = 15) row 5: top-p's kept set is 122899
    at the torch backend's normaliser, its sum over the batch, and 122900 one ulp above it
    (triton's token, 211700). `--explain` sums the weights batch-wide as `softmax_kept`: the
    row's sum alone is another float32 number, at which it had printed 122900 kept beside
    the backend's draw 211699."""
    big = ["--rows", "64", "--vocabs", "131073", "151936", "200003", "262144"]
    proc = _fuzz("--case", "300002", *big, "--explain", "5", "0", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the draw: token 211699," in proc.stdout, proc.stdout
    assert "kept 122899:" in proc.stdout and "(a float32 rounding tie)" in proc.stdout
    assert "the kept set first moves with s moved by 1 ulps: 122900 kept, the draw 211700" \
        in proc.stdout, proc.stdout


def test_explain_takes_top_p_over_the_top_k_survivors() -> None:
    """Row 0 of CPU case 9 (V = 111, top_k 60, top_p 0.9, no min-p): the torch backend keeps
    54 tokens; top-p over the whole row, ignoring top-k (explain before 2026-12-06), keeps 97."""
    out = _fuzz("--case", "9", "--vocabs", "37", "111", "257", "--explain", "0", "0",
                timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "top_k 60, top_p 0.899999976" in out.stdout, out.stdout
    assert "kept 54:" in out.stdout, out.stdout


def test_explain_places_the_draw() -> None:
    """The two rows that differed in GPU fuzz run 232 (2026-12-06). Case 171024 row 2, the
    bonus draw over a flat fp16 row of 262144 tokens: the target lies 5e-10 S below a token
    boundary (the kernels' float32 tile masses move it past: their token was the next id).
    Case 176005 row 12: the kept set of top-p grows when s drops by 4 ulps, and the draw with
    it is 49925, the kernels' token (torch's is 49920). The torch backend alone, on the CPU."""
    big = ["--rows", "64", "--vocabs", "131073", "151936", "200003", "262144", "--ulp-groups"]
    flat = _fuzz("--case", "171024", *big, "--explain", "2", "1", timeout=300)
    assert flat.returncode == 0, flat.stderr[-3000:]
    assert "the bonus draw: token 23879, the target at 0.999869" in flat.stdout, flat.stdout
    assert "(token 23880 across it)" in flat.stdout, flat.stdout
    assert "a rounding tie of the tile masses" in flat.stdout, flat.stdout
    top_p = _fuzz("--case", "176005", *big, "--explain", "12", "0", timeout=300)
    assert top_p.returncode == 0, top_p.stderr[-3000:]
    assert "the draw: token 49920" in top_p.stdout, top_p.stdout
    assert "tie of the tile masses" not in top_p.stdout, top_p.stdout
    assert "the draw with s moved by -4..4 ulps: [49925, 49920," in top_p.stdout, top_p.stdout


def test_stages_follow_one_row_through_the_reference() -> None:
    """`--stages` on GPU fuzz run 241's case 271000 row 1 (V = 128256, fp32, top_p 0.999),
    here the CPU against itself: the row's top-p crossing (sorted index 128107, 128108 kept,
    as `--explain` finds) and its draw (96337, the kernels' token on CUDA; torch on CUDA drew
    96336), which is the backend's own token (the stages run batch-wide, as the backend does:
    a row's float32 sums round otherwise alone). On the GPU machine `--device cuda` says
    which stage parts."""
    args = ["--case", "271000", "--vocabs", "111", "1000", "32000", "50257", "128256",
            "--ulp-groups", "--stages", "1", "0"]
    out = _fuzz(*args, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "top-p 0.999000013 crosses at sorted index 128107" in out.stdout, out.stdout
    assert "kept 128108" in out.stdout and "token         equal ([96337] vs [96337])" in out.stdout
    assert "backend_token equal ([96337] vs [96337])" in out.stdout, out.stdout


def test_explain_finds_how_far_the_kept_set_is_from_moving() -> None:
    """Case 271000 row 1 (run 241: torch on CUDA drew 96336, torch on the CPU and the kernels
    96337): top-p's kept set holds within 4 ulps of the normaliser but drops its threshold
    token when s falls by 9 ulps, and the draw then is CUDA's 96336 — the crossing lies ~12
    float32 ulps of the cumulative sum from top_p, within reach of a float32 scan's rounding
    over 128107 sorted probabilities."""
    args = ["--case", "271000", "--vocabs", "111", "1000", "32000", "50257", "128256",
            "--ulp-groups", "--explain", "1", "0"]
    out = _fuzz(*args, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "kept with s moved by -4..4 ulps: [128108, 128108," in out.stdout, out.stdout
    assert ("the kept set first moves with s moved by -9 ulps: 128107 kept, the draw 96336"
            in out.stdout), out.stdout


def test_explain_lists_the_draws_of_the_cuts_about_the_crossing() -> None:
    """GPU fuzz run 251's case 398005 row 42 (verify V = 128256, fp32, ulp groups, top_p 0.9,
    the draft rejected: a residual draw): torch on the CPU drew 86444, torch on CUDA 86510,
    the kernels on CUDA 86337. The residual's draws with the normaliser moved give the first
    two; the kept sets cut at the distinct x - M about the crossing (any rounding keeps one
    of them) hold the third, at the cut exact arithmetic makes (117677 kept, inside the
    CPU's float32 weight group). CPU fuzz case 37574 row 0 (sample V = 2100): the kernels'
    S kept 44 and drew 1010 (session 66, printed from the kernel), the torch backend keeps 58
    (1211); exact arithmetic keeps 38, whose draw is 1010 too. The torch backend alone, on
    the CPU."""
    args = ["--case", "398005", "--rows", "64", "--vocabs", "1000", "32000", "128256",
            "--ulp-groups", "--explain", "42", "0"]
    out = _fuzz(*args, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the residual draw: token 86444," in out.stdout, out.stdout
    assert "the draw with s moved by -4..4 ulps: [86444, 86510," in out.stdout, out.stdout
    assert ("  kept 117677: the draw 86337  (exact arithmetic's among them)\n"
            "  kept 123528: the draw 86444  (the torch backend's among them)\n"
            "  kept 128255: the draw 86510\n") in out.stdout, out.stdout
    small = _fuzz("--case", "37574", "--ulp-groups", "--explain", "0", "0", timeout=300)
    assert small.returncode == 0, small.stderr[-3000:]
    assert "  kept 38..39: the draw 1010  (exact arithmetic's among them)\n" in small.stdout
    assert "  kept 43..44: the draw 1010\n" in small.stdout, small.stdout
    assert "  kept 56..58: the draw 1211  (the torch backend's among them)\n" in small.stdout
    assert "exact arithmetic keeps 38, the torch backend 58" in small.stdout, small.stdout


@pytest.mark.gpu
def test_explain_on_cuda_keeps_the_backends_set() -> None:
    """GPU fuzz run 255's case 442016 row 35 (sample V = 131073, B = 42, top_p 0.999): on
    CUDA the torch backend, over its batch, keeps 124610 tokens (`--stages`); `--explain`
    took top-p over the row alone, whose cumulative sum CUDA runs as one device-wide scan
    (a batch's as a scan per row), and printed 124609. It now takes it over the batch."""
    args = ["--case", "442016", "--rows", "64", "--vocabs", "131073", "151936", "200003",
            "262144", "--device", "cuda"]
    stages = _fuzz(*args, "--stages", "35", "0", timeout=300, interpret=False)
    assert stages.returncode == 0, stages.stderr[-3000:]
    cuda = [ln for ln in stages.stdout.splitlines() if ln.strip().startswith("cuda: top-p")]
    assert len(cuda) == 1, stages.stdout
    kept = cuda[0].rsplit("kept ", 1)[1]
    explain = _fuzz(*args, "--explain", "35", "0", timeout=300, interpret=False)
    assert explain.returncode == 0, explain.stderr[-3000:]
    assert f"\nkept {kept}: threshold p" in explain.stdout, (kept, explain.stdout)


def test_cpu_verdict_looks_at_the_differing_entries() -> None:
    """The GPU fuzz's note on a differing case (run 247's case 349039: torch on the CPU drew
    triton's token in the differing row but departed from both in another, and the old
    whole-case comparison said "neither's"): the verdict is taken where torch on the GPU and
    triton differ, and other departures of the CPU are listed apart."""
    code = """if True:
        import torch
        from fuzz_sampler import cpu_verdict
        gpu = torch.tensor([[5, 7], [9, -1], [3, 4]])
        tri = torch.tensor([[5, 8], [9, -1], [3, 4]])
        print(cpu_verdict(gpu, tri, torch.tensor([[5, 8], [2, -1], [3, 4]])))
        print(cpu_verdict(gpu, tri, torch.tensor([[5, 7], [9, -1], [3, 4]])))
        print(cpu_verdict(gpu, tri, torch.tensor([[5, 6], [9, -1], [3, 4]])))
    """
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        "torch on the CPU: triton's tokens (a float32 rounding tie in torch itself); "
        "elsewhere it departs from both at [[1, 0]]: [2] against [9]",
        "torch on the CPU: torch's tokens on the GPU",
        "torch on the CPU: neither's tokens",
    ], out.stdout
