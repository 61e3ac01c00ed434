"""[tool.lowerd] loading: real pyproject.toml files, and the exact line every error blames."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lowerd.cache.location import parse_size
from lowerd.project.backends import KNOWN_BACKENDS
from lowerd.project.config import (
    TargetConfig,
    find_config,
    load_config,
    select_targets,
)
from lowerd.project.errors import ConfigError
from lowerd.project.export_options import ExportConfig
from lowerd.project.located import Located
from lowerd.project.toml_lines import KeyLocator
from lowerd.project.wire import encode

from helpers import load_error, write_pyproject

# Good configs ------------------------------------------------------------------------------


def test_minimal_config_takes_defaults(tmp_path: Path) -> None:
    path = write_pyproject(
        tmp_path,
        """\
        [project]
        name = "demo"

        [tool.lowerd.targets.vit]
        entry = "models/vit.py:make"
        """,
    )
    config = load_config(path)
    assert config.path == path
    assert config.root == tmp_path
    assert config.backends == ("xnnpack",)
    assert config.out_dir == tmp_path / "build"
    assert config.cache_dir is None
    assert config.cache_max_size is None
    assert config.timeout is None
    assert config.daemon is False
    assert config.warm_libraries is True
    assert config.targets == {
        "vit": TargetConfig(
            name="vit",
            line=4,
            entry=Located("models/vit.py:make", 5),
            backends=("xnnpack",),
            etrecord=False,
            backend_options={},
            quantize=None,
            edge_compile_config={},
            executorch_backend_config={},
            transform_passes=None,
            constant_methods={},
            partitioners=None,
            whole_program=None,
            export=ExportConfig(),
            memory_planning={},
            sym_shape_eval=None,
        )
    }
    assert config.output_path("vit") == tmp_path / "build" / "vit.pte"
    assert len(config.digest) == 64


def test_full_config_with_overrides(tmp_path: Path) -> None:
    path = write_pyproject(
        tmp_path,
        """\
        [tool.lowerd]
        backends = ["vulkan", "xnnpack"]
        out_dir = "out/pte"
        cache_dir = ".cache/lowerd"
        cache_max_size = "5G"
        timeout = 600
        daemon = true
        warm_libraries = false

        [tool.lowerd.targets.vit]
        entry = "models/vit.py:make"
        backends = ["xnnpack", "coreml"]

        [tool.lowerd.targets.mlp]
        entry = "demo.models.mlp:build"
        """,
    )
    config = load_config(path)
    assert config.backends == ("vulkan", "xnnpack")
    assert config.out_dir == tmp_path / "out" / "pte"
    assert config.cache_dir == tmp_path / ".cache" / "lowerd"
    assert config.cache_max_size == "5G"
    assert config.timeout == 600.0 and isinstance(config.timeout, float)
    assert config.daemon is True
    assert config.warm_libraries is False
    assert list(config.targets) == ["vit", "mlp"]

    vit, mlp = config.targets["vit"], config.targets["mlp"]
    assert (vit.backends, vit.line) == (("xnnpack", "coreml"), 10)
    assert (mlp.backends, mlp.line) == (("vulkan", "xnnpack"), 14)
    assert config.output_path("mlp") == tmp_path / "out" / "pte" / "mlp.pte"


def test_absolute_out_dir_is_kept(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    path = write_pyproject(
        tmp_path / "project",
        f"""\
        [tool.lowerd]
        out_dir = "{elsewhere}"
        targets.a.entry = "a.py:f"
        """,
    )
    assert load_config(path).out_dir == elsewhere


@pytest.mark.parametrize(
    ("entry", "parts", "is_path"),
    [
        ("models/vit.py:make", ("models/vit.py", "make"), True),
        ("vit.py:make", ("vit.py", "make"), True),
        ("scripts/vit.py:make", ("scripts/vit.py", "make"), True),
        ("demo.models.vit:make", ("demo.models.vit", "make"), False),
        ("vit:make", ("vit", "make"), False),
    ],
)
def test_entry_parts(tmp_path: Path, entry: str, parts: tuple[str, str], is_path: bool) -> None:
    path = write_pyproject(tmp_path, f'[tool.lowerd.targets.t]\nentry = "{entry}"\n')
    config = load_config(path)
    target = config.targets["t"]
    assert target.entry_parts() == parts
    assert target.entry_is_path is is_path
    expected_file = tmp_path / parts[0] if is_path else None
    assert config.entry_path(target) == expected_file


def test_targets_in_dotted_and_inline_forms(tmp_path: Path) -> None:
    path = write_pyproject(
        tmp_path,
        """\
        [tool.lowerd]
        targets.dotted.backends = ["vulkan"]
        targets.dotted.entry = "a.py:f"
        targets.inline = { entry = "b.py:f" }

        [tool.lowerd.targets."my-net"]
        entry = "c.py:f"

        [tool.lowerd.targets.under]
        # the target's line is its header, not its entry
        entry = "d.py:f"
        """,
    )
    targets = load_config(path).targets
    assert {name: t.line for name, t in targets.items()} == {
        "dotted": 3,
        "inline": 4,
        "my-net": 6,
        "under": 9,
    }
    assert targets["dotted"].backends == ("vulkan",)


def test_targets_as_one_inline_table(tmp_path: Path) -> None:
    path = write_pyproject(
        tmp_path,
        """\
        [tool.lowerd]
        timeout = 2.5
        targets = { vit = { entry = "vit.py:make" }, mlp = { entry = "mlp.py:make" } }
        """,
    )
    config = load_config(path)
    assert [(t.name, t.line) for t in config.targets.values()] == [("vit", 3), ("mlp", 3)]
    assert config.timeout == 2.5


def test_targets_table_with_inline_entries(tmp_path: Path) -> None:
    path = write_pyproject(
        tmp_path,
        """\
        [tool.lowerd.targets]
        vit = { entry = "vit.py:make", backends = ["vulkan"] }

        mlp.entry = "mlp.py:make"
        """,
    )
    targets = load_config(path).targets
    assert (targets["vit"].line, targets["vit"].backends) == (2, ("vulkan",))
    assert targets["mlp"].line == 4


def test_config_can_be_loaded_by_relative_path(tmp_path: Path, monkeypatch) -> None:
    write_pyproject(tmp_path, '[tool.lowerd.targets.t]\nentry = "t.py:f"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(Path("pyproject.toml"))
    assert config.path == tmp_path / "pyproject.toml"
    assert config.out_dir == tmp_path / "build"


# The digest --------------------------------------------------------------------------------


def digest_of(folder: Path, text: str) -> str:
    return load_config(write_pyproject(folder, text)).digest


def test_digest_ignores_layout_comments_and_other_tables(tmp_path: Path) -> None:
    first = digest_of(
        tmp_path / "a",
        """\
        [project]
        name = "one"
        [tool.lowerd]
        timeout = 10
        [tool.lowerd.targets.vit]
        entry = "vit.py:make"
        """,
    )
    second = digest_of(
        tmp_path / "b",
        """\
        [project]
        name = "two"  # unrelated change

        [tool.lowerd]
        targets = { vit = { entry = "vit.py:make" } }
        timeout = 10
        """,
    )
    assert first == second


def test_digest_changes_with_the_lowerd_table(tmp_path: Path) -> None:
    text = '[tool.lowerd]\ntimeout = {}\n[tool.lowerd.targets.vit]\nentry = "vit.py:make"\n'
    assert digest_of(tmp_path / "a", text.format(10)) != digest_of(tmp_path / "b", text.format(11))


# Errors, each at its exact line ------------------------------------------------------------


def test_toml_syntax_error_gives_tomllib_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """\
        [tool.lowerd]
        backends = ["xnnpack"]
        timeout = = 3
        """,
    )
    assert error.location.line == 3
    assert error.message.startswith("invalid TOML: ")
    assert "(at line" not in error.message
    assert "column" in error.message


def test_an_integer_past_pythons_digit_limit_is_invalid_toml_at_its_line(tmp_path: Path) -> None:
    # tomllib's int() raises a ValueError of its own there, not a TOMLDecodeError.
    error = load_error(tmp_path, f"[tool.lowerd]\nbackends = []\ntimeout = {'9' * 5000}\n")
    assert error.location.line == 3
    assert error.message.startswith("invalid TOML: an integer of more than")


def test_toml_error_at_end_of_document_blames_last_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """\
        [tool.lowerd]
        backends = ["xnnpack",
        """,
    )
    assert error.location.line == 2
    assert "end of file" in error.message


def test_duplicate_table_is_a_toml_error(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """\
        [tool.lowerd.targets.vit]
        entry = "a.py:f"
        [tool.lowerd.targets.vit]
        entry = "b.py:f"
        """,
    )
    assert error.location.line == 3


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(b'[tool.lowerd]\n# caf\xe9\ntargets.a.entry = "a.py:f"\n')
    with pytest.raises(ConfigError, match="UTF-8") as info:
        load_config(path)
    assert info.value.location.line == 2


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_config(path)
    assert info.value.location.file == str(path)
    assert info.value.location.line is None


def test_no_lowerd_table(tmp_path: Path) -> None:
    error = load_error(tmp_path, '[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n')
    assert "no [tool.lowerd] table" in error.message
    assert error.location.line is None


@pytest.mark.parametrize(
    ("text", "line", "fragments"),
    [
        pytest.param(
            """\
            [tool]
            ruff = {}
            lowerd = "xnnpack"
            """,
            3,
            ["tool.lowerd must be a table", 'the string "xnnpack"'],
            id="lowerd-not-a-table",
        ),
        pytest.param(
            """\
            [project]
            name = "x"

            [tool.lowerd]
            backends = ["xnnpack"]
            """,
            4,
            ["no targets", "[tool.lowerd.targets.<name>]"],
            id="no-targets",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = ["xnnpack"]
            [tool.lowerd.targets]
            """,
            3,
            ["no targets"],
            id="empty-targets",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets = ["vit"]
            """,
            2,
            ["targets must be a table", "an array"],
            id="targets-not-a-table",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = ["xnnpack"]
            outdir = "build"
            [tool.lowerd.targets.a]
            entry = "a.py:f"
            """,
            3,
            [
                "unknown key 'outdir' in [tool.lowerd]",
                "unknown key 'outdir' in [tool.lowerd] (did you mean 'out_dir'?); allowed keys",
                "allowed keys: backends, out_dir, cache_dir, cache_max_size, cache_url, "
                "cache_remote, cache_ttl, cache_remote_max_entry_size, cache_remote_timeout, "
                "cache_remote_sign_key, cache_remote_verify_key, "
                "executor, ray_address, timeout, daemon, warm_libraries, etrecord, ",
            ],
            id="unknown-project-key",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_url = "http://cache:6379"
            targets.a.entry = "a.py:f"
            """,
            2,
            ["cache_url must be a redis URL (redis://, rediss://, unix://)", "'http://cache:6379'"],
            id="cache-url-not-redis",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_url = "redis://ci:hunter2@cache:6379/0"
            cache_remote = "write-only"
            targets.a.entry = "a.py:f"
            """,
            3,
            [
                "cache_remote must be one of 'read-write', 'read-only'",
                'got the string "write-only"',
            ],
            id="cache-remote-mode",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_remote_verify_key = 3
            targets.a.entry = "a.py:f"
            """,
            2,
            ["cache_remote_verify_key must be a file path string", "got the integer 3"],
            id="cache-verify-key-not-a-path",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_url = "redis://cache:6379/0"
            cache_ttl = 1.5
            targets.a.entry = "a.py:f"
            """,
            3,
            ["cache_ttl must be a positive number of seconds"],
            id="cache-ttl-not-an-int",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_url = "redis://cache:6379/0"
            cache_remote_max_entry_size = "big"
            targets.a.entry = "a.py:f"
            """,
            3,
            ['cache_remote_max_entry_size must be a size like "500M"'],
            id="cache-remote-max-entry-size",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            executor = "slurm"
            targets.a.entry = "a.py:f"
            """,
            2,
            ["executor must be one of 'local', 'ray'", 'got the string "slurm"'],
            id="executor-unknown",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:f"
            backend = ["vulkan"]
            """,
            3,
            ["unknown key 'backend' in target 'a'", "did you mean 'backends'?", "entry, backends"],
            id="unknown-target-key",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets.a.entry = "a.py:f"
            targets.a.device = "cpu"
            """,
            3,
            ["unknown key 'device' in target 'a'; allowed keys: entry, backends"],
            id="unknown-dotted-target-key",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets = { a = { entry = "a.py:f", optimize = true } }
            """,
            2,
            ["unknown key 'optimize'"],
            id="unknown-inline-target-key",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:f"

            [tool.lowerd.targets.a.options]
            fast = true
            """,
            4,
            ["unknown key 'options' in target 'a'"],
            id="unknown-target-subtable",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = "xnnpack"
            targets.a.entry = "a.py:f"
            """,
            2,
            ["backends must be a list", 'the string "xnnpack"'],
            id="backends-not-a-list",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = [
                "xnnpack",
                3,
            ]
            targets.a.entry = "a.py:f"
            """,
            4,
            ["backend names are strings", "the integer 3"],
            id="backend-not-a-string",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = []
            targets.a.entry = "a.py:f"
            """,
            2,
            ["backends must not be empty", "known backends: " + ", ".join(KNOWN_BACKENDS)],
            id="empty-backends",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = [
                "xnnpack",  # the CPU fallback
                "vulkn",
            ]
            targets.a.entry = "a.py:f"
            """,
            4,
            [
                "unknown backend 'vulkn'",
                "did you mean 'vulkan'?",
                "known backends: " + ", ".join(KNOWN_BACKENDS),
            ],
            id="unknown-backend",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = ["XNNPACK"]
            targets.a.entry = "a.py:f"
            """,
            2,
            ["unknown backend 'XNNPACK' (did you mean 'xnnpack'?); known backends"],
            id="backend-wrong-case",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            backends = ["xnnpack", "vulkan", "xnnpack"]
            targets.a.entry = "a.py:f"
            """,
            2,
            ["backend 'xnnpack' is listed twice"],
            id="duplicate-backend",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:f"

            [tool.lowerd.targets.b]
            entry = "b.py:f"
            backends = ["xnnpack", "tpu"]
            """,
            6,
            ["unknown backend 'tpu'"],
            id="unknown-target-backend",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            out_dir = 3
            targets.a.entry = "a.py:f"
            """,
            2,
            ["out_dir must be a folder path string", "the integer 3"],
            id="out-dir-not-a-string",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            out_dir = ""
            targets.a.entry = "a.py:f"
            """,
            2,
            ["out_dir must be a folder path string"],
            id="out-dir-empty",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets.a.entry = "a.py:f"
            cache_dir = ["a"]
            """,
            3,
            ["cache_dir must be a folder path string", "an array"],
            id="cache-dir-not-a-string",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_max_size = "lots"
            targets.a.entry = "a.py:f"
            """,
            2,
            ["cache_max_size must be a size", 'the string "lots"'],
            id="cache-size-not-a-size",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            cache_max_size = 5
            targets.a.entry = "a.py:f"
            """,
            2,
            ["cache_max_size must be a size", "the integer 5"],
            id="cache-size-not-a-string",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            timeout = 0
            targets.a.entry = "a.py:f"
            """,
            2,
            ["timeout must be a positive number of seconds", "the integer 0"],
            id="timeout-zero",
        ),
        pytest.param(
            """\
            [tool.lowerd]

            timeout = -1.5
            targets.a.entry = "a.py:f"
            """,
            3,
            ["timeout must be a positive number", "the float -1.5"],
            id="timeout-negative",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            timeout = "600"
            targets.a.entry = "a.py:f"
            """,
            2,
            ["timeout must be a positive number", 'the string "600"'],
            id="timeout-string",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            timeout = true
            targets.a.entry = "a.py:f"
            """,
            2,
            ["the boolean true"],
            id="timeout-boolean",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets.a.entry = "a.py:f"
            daemon = "yes"
            """,
            3,
            ["daemon must be true or false", 'the string "yes"'],
            id="daemon-not-a-boolean",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            timeout = nan
            targets.a.entry = "a.py:f"
            """,
            2,
            ["timeout must be a positive number"],
            id="timeout-nan",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            backends = ["xnnpack"]
            """,
            1,
            ["target 'vit' has no entry", 'entry = "models/net.py:make"'],
            id="missing-entry",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            backends = ["xnnpack"]
            entry = ["vit.py:make"]
            """,
            3,
            ["entry must be a string", "an array"],
            id="entry-not-a-string",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            entry = "models/vit.py"
            """,
            2,
            ["entry 'models/vit.py' must name a function: 'models/vit.py:make'"],
            id="entry-without-function",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            entry = "models/vit.py:"
            """,
            2,
            ["must name a function: 'models/vit.py:make'"],
            id="entry-empty-function",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            entry = ":make"
            """,
            2,
            ["needs a file or module before ':'"],
            id="entry-without-module",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            entry = "vit.py:make-model"
            """,
            2,
            ["'make-model' in entry 'vit.py:make-model' is not a function name"],
            id="entry-bad-function",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.vit]
            entry = "my-models.vit:make"
            """,
            2,
            ["neither a .py file nor a dotted module name"],
            id="entry-bad-module",
        ),
        pytest.param(
            """\
            [tool.lowerd.targets.ok]
            entry = "ok.py:f"

            [tool.lowerd.targets."my net"]
            entry = "net.py:f"
            """,
            4,
            ["target name 'my net' cannot name a .pte file"],
            id="target-name-with-space",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets = { "a/b" = { entry = "ab.py:f" } }
            """,
            2,
            ["target name 'a/b' cannot name a .pte file"],
            id="target-name-with-slash",
        ),
        pytest.param(
            """\
            [tool.lowerd]
            targets.vit = "models/vit.py:make"
            """,
            2,
            ["target 'vit' must be a table with an entry", "the string"],
            id="target-not-a-table",
        ),
        pytest.param(
            """\
            [[tool.lowerd.targets]]
            entry = "vit.py:make"
            """,
            1,
            ["targets must be a table", "an array"],
            id="targets-array-of-tables",
        ),
    ],
)
def test_config_errors_blame_the_offending_line(
    tmp_path: Path, text: str, line: int, fragments: list[str]
) -> None:
    error = load_error(tmp_path, text)
    for fragment in fragments:
        assert fragment in error.message
    assert error.location.line == line, error.message


def test_error_renders_as_file_line_message(tmp_path: Path) -> None:
    error = load_error(tmp_path, '[tool.lowerd]\ntimeout = 0\ntargets.a.entry = "a.py:f"\n')
    assert str(error).startswith(f"{tmp_path / 'pyproject.toml'}:2: timeout must be")
    assert encode(error.info())["kind"] == "config-error"


def test_keys_in_strings_and_comments_are_not_mistaken_for_keys(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        '''\
        [project]
        description = """
        [tool.lowerd]
        timeout = 0
        """
        # timeout = 0
        [tool.lowerd]
        targets.a.entry = "a.py:f"
        timeout = 0
        ''',
    )
    assert error.location.line == 9


# The locator on its own --------------------------------------------------------------------


def test_locator_finds_headers_keys_and_array_elements() -> None:
    locator = KeyLocator(
        textwrap.dedent(
            """\
            [ tool . lowerd ]  # spaced header
            backends = [
              "xnnpack",
            ]
            [tool.lowerd.targets.'lit name']
            entry = 'x.py:f'
            """
        )
    )
    assert locator.line(("tool", "lowerd")) == 1
    assert locator.line(("tool", "lowerd", "backends")) == 2
    assert locator.line(("tool", "lowerd", "backends", 0)) == 3
    assert locator.header_line(("tool", "lowerd", "targets", "lit name")) == 5
    assert locator.line(("tool", "lowerd", "targets", "lit name", "entry")) == 6
    assert locator.line(("tool", "missing")) is None


def test_locator_keeps_what_it_found_before_text_it_cannot_read() -> None:
    locator = KeyLocator('[tool.lowerd]\ntimeout = 1\n@@@ nonsense\nout_dir = "x"\n')
    assert locator.line(("tool", "lowerd", "timeout")) == 2
    assert locator.line(("tool", "lowerd", "out_dir")) is None
    assert KeyLocator('a = """never closed').line(("a",)) == 1


# find_config -------------------------------------------------------------------------------


LOWERD_PYPROJECT = '[tool.lowerd.targets.a]\nentry = "a.py:f"\n'


def test_find_config_walks_up_from_a_folder_and_a_file(tmp_path: Path) -> None:
    config = write_pyproject(tmp_path / "project", LOWERD_PYPROJECT)
    nested = tmp_path / "project" / "models" / "vision"
    nested.mkdir(parents=True)
    model = nested / "vit.py"
    model.write_text("")
    assert find_config(nested) == config
    assert find_config(model) == config
    assert find_config(config) == config
    assert find_config(tmp_path / "project") == config


def test_find_config_skips_pyprojects_without_lowerd(tmp_path: Path) -> None:
    config = write_pyproject(tmp_path, LOWERD_PYPROJECT)
    write_pyproject(tmp_path / "sub", '[project]\nname = "sub"\n[tool.ruff]\nline-length = 90\n')
    write_pyproject(
        tmp_path / "sub" / "broken", "[project\n"
    )  # broken, but nothing to do with lowerd
    assert find_config(tmp_path / "sub" / "broken") == config


def test_find_config_reports_a_broken_pyproject_that_mentions_lowerd(tmp_path: Path) -> None:
    write_pyproject(tmp_path, LOWERD_PYPROJECT)
    broken = write_pyproject(
        tmp_path / "sub", "[tool.lowerd]\ntimeout = \n[tool.lowerd.targets.a]\n"
    )
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        find_config(tmp_path / "sub")
    assert (info.value.location.file, info.value.location.line) == (str(broken), 2)


def test_find_config_without_any(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[project]\nname = "x"\n')
    with pytest.raises(ConfigError, match="no pyproject.toml with \\[tool.lowerd\\] found in"):
        find_config(tmp_path)


# select_targets ----------------------------------------------------------------------------


@pytest.fixture
def three_targets(tmp_path: Path):
    return load_config(
        write_pyproject(
            tmp_path,
            """\
            [tool.lowerd.targets.vit]
            entry = "vit.py:make"
            [tool.lowerd.targets.mlp]
            entry = "mlp.py:make"
            [tool.lowerd.targets.resnet]
            entry = "resnet.py:make"
            """,
        )
    )


def test_select_all_targets_in_file_order(three_targets) -> None:
    assert [t.name for t in select_targets(three_targets, [])] == ["vit", "mlp", "resnet"]


def test_select_named_targets_in_given_order(three_targets) -> None:
    selected = select_targets(three_targets, ["resnet", "vit", "resnet"])
    assert [t.name for t in selected] == ["resnet", "vit"]


def test_select_unknown_target(three_targets) -> None:
    with pytest.raises(ConfigError) as info:
        select_targets(three_targets, ["vit", "resnt"])
    error = info.value
    assert "unknown target 'resnt' (did you mean 'resnet'?); known targets" in error.message
    assert "known targets: vit, mlp, resnet" in error.message
    assert error.location.file == str(three_targets.path)


def test_select_several_unknown_targets(three_targets) -> None:
    with pytest.raises(ConfigError, match="unknown targets 'a', 'b'; known targets: vit"):
        select_targets(three_targets, ["a", "b"])


def test_output_path_of_unknown_target(three_targets) -> None:
    with pytest.raises(ConfigError, match="unknown target 'bert'"):
        three_targets.output_path("bert")


# Paths that could never work, refused when the config loads rather than after a lowering -------


@pytest.mark.parametrize(
    ("out_dir", "words"),
    [
        pytest.param("pyproject.toml", "is an existing file, not a folder", id="a-file"),
        pytest.param(
            "pyproject.toml/pte", "pyproject.toml is a file, not a folder", id="under-file"
        ),
        pytest.param("x" * 300, "over the limit of", id="name-too-long"),
        pytest.param("/".join(["y" * 200] * 20), "is too long", id="path-too-long"),
    ],
)
def test_an_unusable_out_dir_is_a_config_error_at_its_line(
    tmp_path: Path, out_dir: str, words: str
) -> None:
    error = load_error(
        tmp_path,
        f"""\
        [tool.lowerd]
        backends = ["xnnpack"]
        out_dir = "{out_dir}"
        targets.a.entry = "a.py:f"
        """,
    )
    assert words in error.message
    assert error.location.line == 3, error.message


def test_a_default_out_dir_that_is_a_file_blames_the_lowerd_table(tmp_path: Path) -> None:
    (tmp_path / "build").write_text("not a folder")
    error = load_error(
        tmp_path, '[project]\nname = "x"\n\n[tool.lowerd]\ntargets.a.entry = "a.py:f"\n'
    )
    assert "'build' is an existing file" in error.message
    assert error.location.line == 4


@pytest.mark.parametrize("entry", ["../../../../etc/passwd:x", "scripts/vit:make"])
def test_an_entry_file_that_is_not_python_is_a_config_error(tmp_path: Path, entry: str) -> None:
    error = load_error(tmp_path, f'[tool.lowerd.targets.t]\nentry = "{entry}"\n')
    assert "is not a Python file" in error.message
    assert error.location.line == 2


@pytest.mark.parametrize(
    "size", ["500M", "1.5GiB", " 2 g ", "1024", ".5T", "12b", "5 GB", "5x", "-1G", "1e3", "G"]
)
def test_config_takes_exactly_the_sizes_the_cache_reads(tmp_path: Path, size: str) -> None:
    """One grammar: the config checks cache_max_size with the parser the cache uses."""
    table = f'[tool.lowerd]\ncache_max_size = "{size}"\ntargets.a.entry = "a.py:f"\n'
    path = write_pyproject(tmp_path, table)
    try:
        parse_size(size)
    except ValueError:
        with pytest.raises(ConfigError, match="cache_max_size must be a size") as info:
            load_config(path)
        assert info.value.location.line == 2
    else:
        assert load_config(path).cache_max_size == size.strip()


def test_the_environment_overrides_the_remote_tier(tmp_path: Path) -> None:
    """One pyproject.toml for read-only laptops and a CI that writes; the password never shows."""
    from lowerd.project.config import load_config
    from lowerd.project.team_config import remote_from_env

    path = write_pyproject(
        tmp_path,
        """\
        [tool.lowerd]
        cache_url = "redis://dev:s3cret@cache:6379/0"
        cache_remote = "read-only"
        cache_ttl = 86400
        [tool.lowerd.targets.a]
        entry = "a.py:f"
        """,
    )
    remote = load_config(path).remote_cache
    assert remote is not None and remote.mode == "read-only" and remote.ttl == 86400
    assert remote.line == 2 and remote.display_url == "redis://dev:***@cache:6379/0"
    assert remote_from_env(remote, {}) == remote
    ci = remote_from_env(remote, {"LOWERD_CACHE_REMOTE": "read-write"})
    assert ci is not None and ci.mode == "read-write" and ci.url == remote.url
    moved = remote_from_env(remote, {"LOWERD_CACHE_URL": "rediss://ci:tok@other:6380/1"})
    assert moved is not None and moved.url == "rediss://ci:tok@other:6380/1" and moved.ttl == 86400
    assert remote_from_env(remote, {"LOWERD_CACHE_URL": ""}) is None
    assert remote_from_env(None, {}) is None
    only_env = remote_from_env(None, {"LOWERD_CACHE_URL": "redis://localhost:6379/2"})
    assert only_env is not None and only_env.mode == "read-write"
    with pytest.raises(ConfigError, match=r"\$LOWERD_CACHE_REMOTE must be one of"):
        remote_from_env(remote, {"LOWERD_CACHE_REMOTE": "yes"})
    with pytest.raises(ConfigError, match=r"\$LOWERD_CACHE_URL must be a redis URL") as bad:
        remote_from_env(remote, {"LOWERD_CACHE_URL": "ftp://x:pw@h/"})
    assert "pw" not in bad.value.message and "ftp://x:***@h/" in bad.value.message
