"""optimum-executorch's own bytes: `main_export` and `lowerd build`, side by side, on the LLM of
examples/ (models/llm.py) in optimum-executorch 1.1.0's xnnpack recipe, three variants: default,
custom SDPA + custom KV cache, and those with 8da4w.

optimum-executorch 1.1.0 pins transformers 5.0.0rc1, whose model code exports other graphs than
the project's 4.57.6: so this runs in a venv of its own (torch 2.13.0 CPU, executorch 1.5.1,
optimum-executorch 1.1.0), made on first use or given with --venv. lowerd runs there from this
checkout's src/, with those of its dependencies the venv lacks installed into a folder beside it
(never into the venv). Each run is a fresh process, optimum's and lowerd's interleaved per
variant, each lowerd build on an empty cache: the times are whole processes, imports included.

    python -m bench.bench_optimum [--venv PATH] [--variants default,custom,custom_8da4w] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.harness import EXAMPLES, REPO, log, workdir

HOME = Path.home() / ".cache" / "lowerd" / "bench-optimum"
PINS = ["torch==2.13.0", "executorch==1.5.1", "optimum-executorch==1.1.0"]
MAX_SEQ_LEN = 64

# `optimum-cli export executorch --recipe xnnpack --max_seq_len 64` flags, as main_export kwargs.
OPTIMUM_KWARGS = {
    "default": {},
    "custom": {"use_custom_sdpa": True, "use_custom_kv_cache": True},
    "custom_8da4w": {"use_custom_sdpa": True, "use_custom_kv_cache": True, "qlinear": "8da4w"},
}

# The same as lowerd targets: examples/pyproject.toml's `llm` is custom_8da4w.
TARGET = """
[tool.lowerd.targets.{name}]
entry = "models/llm.py:{entry}"
{quantize}export = {{ strict = true, no_grad = true, \
module_passes = "models/llm.py:module_passes" }}
edge_compile_config = {{ _check_ir_validity = false, _skip_dim_order = true }}
executorch_backend_config = {{ extract_delegate_segments = true, \
do_quant_fusion_and_const_prop = true }}
memory_planning = {{ alloc_graph_input = false }}
constant_methods = {{ get_dtype = 6, get_bos_id = 1, get_eos_id = 2, get_head_dim = 16.0, \
get_n_kv_heads = 2, get_n_layers = 2, get_vocab_size = 512, get_max_batch_size = 1, \
get_max_seq_len = 64, use_kv_cache = true, use_sdpa_with_kv_cache = {custom}, \
enable_dynamic_shape = true }}
"""
QUANTIZE = (
    'quantize = { scheme = "8da4w", qparams_algorithm = "hqq_scale_only",'
    ' filter = "linear_divisible" }\n'
)

SAVE_CHECKPOINT = """
import sys
sys.path.insert(0, sys.argv[1])
from models.llm import tiny_llama
tiny_llama("sdpa").save_pretrained(sys.argv[2])
"""

MAIN_EXPORT = f"""
import json, sys
from optimum.exporters.executorch import main_export
main_export(model_name_or_path=sys.argv[1], task="text-generation", recipe="xnnpack",
            output_dir=sys.argv[2], max_seq_len={MAX_SEQ_LEN}, **json.loads(sys.argv[3]))
"""


@dataclass
class Cell:
    sha256: str
    seconds: float


class Venv:
    """The bench's venv, and the folder of lowerd's dependencies it lacks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = path / "bin" / "python"
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        self.overlay = HOME / f"lowerd-deps-{digest}"

    def ensure(self) -> None:
        if not self.python.exists():
            log(f"bench: making {self.path} ({', '.join(PINS)})")
            subprocess.run([sys._base_executable, "-m", "venv", str(self.path)], check=True)
            self.pip("install", "-q", *PINS)
        missing = [f"{n}=={v}" for n, v in lowerd_requirements() if not self.has(n)]
        if missing:
            log(f"bench: lowerd's dependencies into {self.overlay}: {' '.join(missing)}")
            self.pip("install", "-q", "--no-deps", "--target", str(self.overlay), *missing)
        # lowerd itself is imported from src/; its version (project/version.py) from metadata.
        info = self.overlay / f"lowerd-{metadata.version('lowerd')}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        metadata_text = (
            f"Metadata-Version: 2.1\nName: lowerd\nVersion: {metadata.version('lowerd')}\n"
        )
        (info / "METADATA").write_text(metadata_text)

    def has(self, name: str) -> bool:
        """Installed in the venv or the folder beside it, at any version: the venv's own are
        left as they are."""
        check = f"import importlib.metadata as m; m.version({name!r})"
        done = subprocess.run([str(self.python), "-c", check], env=self.env(), capture_output=True)
        return done.returncode == 0

    def pip(self, *args: str) -> None:
        subprocess.run([str(self.python), "-m", "pip", *args], check=True)

    def env(self, **extra: str) -> dict[str, str]:
        path = [str(REPO / "src"), str(self.overlay)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), HF_HUB_OFFLINE="1")
        env.update(OMP_NUM_THREADS="1", **extra)
        return env

    def timed(self, args: list[str], cwd: Path, **extra: str) -> tuple[float, str]:
        start = time.perf_counter()
        done = subprocess.run(
            [str(self.python), *args], cwd=cwd, env=self.env(**extra), capture_output=True
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            sys.stderr.write(done.stderr.decode(errors="replace")[-4000:])
            raise SystemExit(f"bench: {args[:2]} failed ({done.returncode})")
        return seconds, done.stdout.decode()

    def versions(self) -> str:
        names = ["torch", "executorch", "torchao", "transformers", "optimum-executorch"]
        code = f"import importlib.metadata as m; print(' '.join(m.version(n) for n in {names!r}))"
        done = subprocess.run([str(self.python), "-c", code], env=self.env(), capture_output=True)
        found = done.stdout.decode().split()
        return ", ".join(f"{n} {v}" for n, v in zip(names, found, strict=True))


def lowerd_requirements() -> list[tuple[str, str]]:
    """lowerd's runtime dependencies and theirs, but torch and ExecuTorch (the bench venv's own),
    at the versions installed here."""
    seen: dict[str, str] = {}
    todo = ["lowerd"]
    while todo:
        for requirement in metadata.requires(todo.pop()) or []:
            if "extra ==" in requirement:
                continue
            name = re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0]
            if name.lower() in seen or name.lower() in ("torch", "executorch"):
                continue
            try:
                seen[name.lower()] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue  # its marker excludes this Python (async-timeout before 3.11.3)
            todo.append(name)
    return sorted(seen.items())


def project(root: Path, variants: list[str]) -> Path:
    """A lowerd project of examples/models/llm.py with one target per variant."""
    (root / "models").mkdir(parents=True)
    shutil.copy(EXAMPLES / "models" / "llm.py", root / "models" / "llm.py")
    (root / "models" / "__init__.py").write_text("")
    text = '[tool.lowerd]\nbackends = ["xnnpack"]\nout_dir = "build"\n'
    for name in variants:
        text += TARGET.format(
            name=name,
            entry="make_default" if name == "default" else "make",
            quantize=QUANTIZE if name.endswith("8da4w") else "",
            custom="false" if name == "default" else "true",
        )
    (root / "pyproject.toml").write_text(text)
    return root


def run(venv: Venv, root: Path, variants: list[str]) -> dict[str, dict[str, Cell]]:
    checkpoint = root / "tiny_llama"
    lowerd_project = project(root / "project", variants)
    venv.timed(["-c", SAVE_CHECKPOINT, str(lowerd_project), str(checkpoint)], root)
    cells: dict[str, dict[str, Cell]] = {}
    for name in variants:
        out = root / f"optimum_{name}"
        kwargs = json.dumps(OPTIMUM_KWARGS[name])
        log(f"bench: {name}: optimum main_export")
        seconds, _ = venv.timed(["-c", MAIN_EXPORT, str(checkpoint), str(out), kwargs], root)
        optimum = Cell(sha256_of(out / "model.pte"), seconds)
        log(f"bench: {name}: lowerd build")
        build = ["-m", "lowerd", "build", "--json", "--no-daemon", name]
        cache = str(root / f"cache_{name}")
        seconds, stdout = venv.timed(build, lowerd_project, LOWERD_CACHE_DIR=cache)
        [target] = json.loads(stdout)["targets"]
        cells[name] = {"optimum": optimum, "lowerd": Cell(target["sha256"], seconds)}
    return cells


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def table(cells: dict[str, dict[str, Cell]]) -> str:
    lines = [
        f"{'variant':<14} {'optimum sha256':<18} {'lowerd sha256':<18} {'equal':>5}"
        f" {'optimum s':>10} {'lowerd s':>9} {'lowerd/optimum':>15}"
    ]
    for name, row in cells.items():
        optimum, lowerd = row["optimum"], row["lowerd"]
        lines.append(
            f"{name:<14} {optimum.sha256[:16]:<18} {lowerd.sha256[:16]:<18}"
            f" {'yes' if optimum.sha256 == lowerd.sha256 else 'NO':>5}"
            f" {optimum.seconds:>10.1f} {lowerd.seconds:>9.1f}"
            f" {lowerd.seconds / optimum.seconds:>15.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=HOME / "venv")
    parser.add_argument("--variants", default=",".join(OPTIMUM_KWARGS))
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parsed = parser.parse_args()
    variants = parsed.variants.split(",")
    unknown = set(variants) - set(OPTIMUM_KWARGS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {list(OPTIMUM_KWARGS)}")
    venv = Venv(parsed.venv)
    venv.ensure()
    with workdir("lowerd-bench-optimum-", parsed.keep) as root:
        cells = run(venv, root, variants)
    print(venv.versions())
    print(table(cells))
    same = all(row["optimum"].sha256 == row["lowerd"].sha256 for row in cells.values())
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
