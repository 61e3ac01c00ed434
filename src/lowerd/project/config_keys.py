"""The field table of [tool.lowerd]: every key, declared once.

A key's entry says where it may be written (its scope), what it takes, its default, how it is
checked (its reader, from config_values.py or lowering_options.py) and what it does. From the
table come the allowed keys of each table (and the did-you-mean for an unknown one), the reading
of each value with its errors at the key's line (config.py), and the key reference,
docs/config-keys.md (config_reference.py). A new key is one entry here, a field of the same name
on the config it fills (ProjectConfig, TargetConfig or RemoteCacheConfig), and its use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from lowerd.project import config_values as values
from lowerd.project import export_options, quantize_options, recipes, runtime_options
from lowerd.project import lowering_options as options
from lowerd.project.compile_configs import SYM_SHAPE_EVAL_PASSES
from lowerd.project.config_reader import Read
from lowerd.project.team_config import EXECUTORS, REMOTE_MODES


class Scope(Enum):
    PROJECT = "project"  # [tool.lowerd]
    TARGET = "target"  # [tool.lowerd.targets.<name>]
    BOTH = "both"  # both; [tool.lowerd]'s value is every target's default

    def allowed_in(self, table: Scope) -> bool:
        return self is table or self is Scope.BOTH


def _target_given_else_project(project: object, target: object | None) -> object:
    return project if target is None else target


@dataclass(frozen=True)
class Key:
    name: str
    scope: Scope
    type: str  # what it takes, in the reference's words
    doc: str  # what it does: a paragraph of the reference
    # Checks a value the file gives and returns what the config holds. None: `targets`, whose
    # tables config.py reads one by one, with the target keys.
    read: Read[object] | None
    # The TOML value taken when the key is absent, checked like a given one; None: no value.
    default: object = None
    shown_default: str | None = None  # the default in the reference's words, when not `default`
    # A BOTH key's target value: (the project's value, the target's or None) -> the value held.
    lay: Callable[..., object] = _target_given_else_project
    # The config field it fills: "" for its own name; None: none, its use folds it into another.
    fills: str | None = ""
    located: bool = False  # held as Located(value, line): its use blames failures on its line
    missing: str | None = None  # a required key: what its table lacks, in the error's words
    group: str | None = None  # the part of the config it belongs to: "remote_cache"

    @property
    def attribute(self) -> str | None:
        return self.name if self.fills == "" else self.fills


_REFERENCE = 'string, `"file.py:function"` or `"package.module:function"`'
_FIELDS_TABLE = "table of `{config}` fields"

# In the order the allowed keys are listed in errors and the reference.
KEYS: tuple[Key, ...] = (
    Key(
        "entry",
        Scope.TARGET,
        _REFERENCE,
        "The function that makes the model: it takes no arguments and returns a "
        "`lowerd.Method(module, args, kwargs, dynamic_shapes=...)` (example inputs by position "
        "and by keyword), `(module, example_args)` or `(module, example_args, dynamic_shapes)` "
        "(one method, `forward`), or a dict of those by method name (a multi-method program "
        "whose modules may share weights). A file is relative to the pyproject.toml; the project "
        "folder is put on `sys.path`, so model files import their siblings. A missing file or "
        "function, or a name without Python source (a builtin such as `os:getcwd`), is an error "
        "at this line, before anything is called; so for every key that names a function.",
        values.reference,
        shown_default="required",
        located=True,
        missing='has no entry; add entry = "models/net.py:make"',
    ),
    Key(
        "backends",
        Scope.BOTH,
        "array of backend names: `xnnpack`, `vulkan`, `coreml`",
        "The backends whose partitioners lower the target, in priority order (the first claims "
        "an op before the next). A target's list replaces the project's. `partitioners` and "
        "`whole_program` replace it: a target sets at most one of the three.",
        values.backend_names,
        default=["xnnpack"],
    ),
    Key(
        "out_dir",
        Scope.PROJECT,
        "string, a folder",
        "Where `<target>.pte` (and its data files) are written, relative to the pyproject.toml "
        "unless absolute. A folder no file could be written in (a file in its place, a path "
        "past the system's limits) is an error at this line, before any lowering.",
        values.output_folder,
        default="build",
    ),
    Key(
        "cache_dir",
        Scope.PROJECT,
        "string, a folder",
        "The local cache of lowered partitions, quantization searches and edge op tables, "
        "relative to the pyproject.toml unless absolute. `$LOWERD_CACHE_DIR` wins over it.",
        values.project_folder,
        shown_default="`$LOWERD_CACHE_DIR`, else `$XDG_CACHE_HOME/lowerd`",
    ),
    Key(
        "cache_max_size",
        Scope.PROJECT,
        'string, a size like `"500M"` or `"5G"`',
        "The local cache's size limit: past it, the least-recently-used entries are evicted.",
        values.size,
        shown_default="no limit",
    ),
    Key(
        "cache_url",
        Scope.PROJECT,
        "string, a redis URL (`redis://`, `rediss://`, `unix://`)",
        "A team's shared cache tier behind the local cache: a local miss asks redis, a fresh "
        "entry is put to it. `$LOWERD_CACHE_URL` overrides it (an empty value turns the tier "
        "off). When the server is down, slow or full, the build goes on with the local cache "
        "and says so; the editor shows it at this line. The password is never shown.",
        values.redis_url,
        shown_default="none: no remote tier",
        fills="url",
        group="remote_cache",
    ),
    Key(
        "cache_remote",
        Scope.PROJECT,
        'string, `"read-write"` or `"read-only"`',
        "Whether this machine also writes the redis tier or only reads it (laptops read what "
        "CI wrote). `$LOWERD_CACHE_REMOTE` overrides it.",
        values.one_of(REMOTE_MODES),
        default="read-write",
        fills="mode",
        group="remote_cache",
    ),
    Key(
        "cache_ttl",
        Scope.PROJECT,
        "integer, seconds",
        "How long an entry lives in redis.",
        values.whole_seconds,
        shown_default="until redis evicts it",
        fills="ttl",
        group="remote_cache",
    ),
    Key(
        "cache_remote_max_entry_size",
        Scope.PROJECT,
        'string, a size like `"64M"`',
        "Entries larger than this are neither sent to redis nor taken from it.",
        values.size,
        default="64M",
        fills="max_entry_size",
        group="remote_cache",
    ),
    Key(
        "cache_remote_timeout",
        Scope.PROJECT,
        "number, seconds",
        "How long a redis command may take: the first one slower turns the tier off for the "
        "rest of the build.",
        values.seconds,
        default=2.0,
        fills="timeout",
        group="remote_cache",
    ),
    Key(
        "cache_remote_sign_key",
        Scope.PROJECT,
        "string, a key file",
        "An ed25519 private key, unencrypted: PEM (`openssl genpkey -algorithm ed25519 -out "
        "sign.pem`) or OpenSSH's (`ssh-keygen -t ed25519`), relative to the pyproject.toml unless "
        "absolute. Every entry this machine puts to redis is signed with it, over its kind, key "
        "and content digest, and this machine takes from redis only entries signed with it (or "
        "with `cache_remote_verify_key`'s). Give it to the writers (CI) only: a file its group or "
        "others may read or write, or that holds no ed25519 private key, is an error at this line. "
        "`$LOWERD_CACHE_SIGN_KEY` (an absolute path; empty: none) overrides it.",
        values.sign_key_file,
        shown_default="none: entries are put unsigned",
        fills="sign_key",
        group="remote_cache",
    ),
    Key(
        "cache_remote_verify_key",
        Scope.PROJECT,
        "string, a key file",
        "The public half of the writers' signing key (`openssl pkey -in sign.pem -pubout`, or "
        "ssh-keygen's `.pub`), relative to the pyproject.toml unless absolute: this machine takes "
        "from redis only entries signed with that key for their own kind and key. An unsigned or "
        "mis-signed entry is a miss, counted (`rejected`) and said in one line, and its partition "
        "is lowered here. Without it (and without a signing key), whoever can write to the redis "
        "decides the bytes a build takes. A file its group or others may write, or that holds no "
        "ed25519 public key, is an error at this line. `$LOWERD_CACHE_VERIFY_KEY` (an absolute "
        "path; empty: none) overrides it.",
        values.verify_key_file,
        shown_default="the signing key's public half, else none: any writer's entries are taken",
        fills="verify_key",
        group="remote_cache",
    ),
    Key(
        "executor",
        Scope.PROJECT,
        'string, `"local"` or `"ray"`',
        'Where stale targets build: forked local workers, or (`"ray"`) tasks on a Ray cluster. '
        "`lowerd build --executor` wins over it.",
        values.one_of(EXECUTORS),
        default="local",
    ),
    Key(
        "ray_address",
        Scope.PROJECT,
        "string, what `ray.init(address=...)` takes",
        'The Ray cluster for `executor = "ray"` (`host:port`, `ray://host:10001`, `auto`). '
        "Without one, `ray.init()` decides. `lowerd build --ray-address` wins over it.",
        values.text,
        shown_default="none",
    ),
    Key(
        "timeout",
        Scope.PROJECT,
        "number, seconds",
        "How long one target's build may take, in every build worker (in-process too); past "
        "it the target fails as a worker-timeout at its entry function.",
        values.seconds,
        shown_default="no limit (the editor's workers: 600)",
    ),
    Key(
        "daemon",
        Scope.PROJECT,
        "boolean",
        "`lowerd build` starts the project's daemon when none runs, as `--daemon` does.",
        values.flag,
        default=False,
    ),
    Key(
        "warm_libraries",
        Scope.PROJECT,
        "boolean",
        "The daemon's fork server imports the installed libraries a build used, so the next "
        "builds start with them. Turn it off for an entry whose library imports depend on what "
        "it does first (an environment variable it sets before importing, say).",
        values.flag,
        default=True,
    ),
    Key(
        "etrecord",
        Scope.BOTH,
        "boolean",
        "Also write `<out_dir>/<target>.etrecord`, the ETRecord of "
        "`to_edge_transform_and_lower(..., generate_etrecord=True)` that the devtools Inspector "
        "reads. The .pte is byte-identical without it; turning it on or off rebuilds the target.",
        values.flag,
        default=False,
    ),
    Key(
        "external_constants",
        Scope.TARGET,
        "boolean",
        "Shorthand for `executorch_backend_config.external_constants = true` (one or the "
        "other, not both): the constants the program keeps outside its delegates go to "
        "`<target>.ptd` (another tag T to `<target>.T.ptd`) instead of the .pte.",
        values.flag,
        default=False,
        fills=None,
    ),
    Key(
        "backend_options",
        Scope.BOTH,
        "table of backends (`[<table>.backend_options.<backend>]`), each a table of options",
        "The arguments of a backend's partitioner. XNNPACK: `config_precisions` (`fp32`, "
        "`static_quant`, `dynamic_quant`), `per_op_mode`. Vulkan: `compile_options`, the table "
        "given as `VulkanPartitioner(compile_options=...)`. CoreML: `compute_unit`, "
        "`minimum_deployment_target`, `model_type`, passed to "
        "`CoreMLBackend.generate_compile_specs`. A target's options are laid over the "
        "project's, option by option. Only the options of the backends a target uses decide "
        "its bytes; `lowerd build --json` shows them in `backend_options`.",
        options.backend_options,
        default={},
        lay=options.lay_backend_options,
    ),
    Key(
        "quantize",
        Scope.TARGET,
        'table: `scheme` (`"xnnpack-int8"`, `"xnnpack-int8-dynamic"`, `"8da4w"`, `"8da8w"`); '
        "PT2E schemes: `calibration` (a function reference, like `entry`); torchao schemes: "
        '`granularity` (`"per_group"`, `"per_channel"`), `group_size` (a positive integer), '
        '`qparams_algorithm` (`"affine"`, `"hqq_scale_only"`), `filter` (`"linear"`, '
        '`"linear_divisible"`)',
        "How each method is quantized before its final export. `xnnpack-int8` and "
        "`xnnpack-int8-dynamic` run ExecuTorch's PT2E flow with XNNPACKQuantizer (symmetric, "
        "per-channel int8; `is_dynamic=True` for the dynamic scheme); `calibration` names a "
        "function returning a list of example-argument tuples (or `{method: [tuples]}`); without "
        "it, each method calibrates with its example args. `8da4w` and `8da8w` run torchao's "
        "`quantize_` with `Int8DynamicActivationIntxWeightConfig` (int8 activations per token, "
        "int4 or int8 weights) on each method's module, then `unwrap_tensor_subclass`, as "
        "optimum-executorch's `--qlinear` and ExecuTorch's `xnnpack_torchao_*` recipes do: "
        "`granularity` `PerGroup(group_size)` (8da4w's default; `group_size` 32 unless given) or "
        "`PerAxis(0)` (8da8w's default), `qparams_algorithm` torchao's "
        "`intx_choose_qparams_algorithm` (its default `affine`; optimum's is `hqq_scale_only`), "
        "`filter` every `nn.Linear` (torchao's default) or only those whose `in_features` "
        "divides by `group_size` (optimum's, per channel too). A combination that means nothing "
        "(a torchao key with a PT2E scheme, `calibration` with a torchao one, `group_size` per "
        'channel with `filter = "linear"`) is an error at its line.',
        quantize_options.quantize,
        shown_default="none: exported as the entry returns it",
    ),
    Key(
        "export",
        Scope.BOTH,
        "table: `strict`, `no_grad` (booleans), `module_passes` (a function reference, like "
        "`entry`)",
        "How each method is exported. `strict = true` is `torch.export.export(..., "
        "strict=True)`. `no_grad = true` exports under `torch.no_grad()` (the lowering runs in "
        "the process's grad mode, as optimum-executorch does). `module_passes` names a function "
        "of no arguments returning a list of callables, applied in order to the exported "
        "program's `ep.module()` (each returns a GraphModule or a PassResult, as ExecuTorch's "
        "passes do), after which the module is exported again with the same inputs and "
        "settings; its file is an input of the build. A target's keys are laid over the "
        "project's, key by key.",
        export_options.export_settings,
        default={},
        shown_default="non-strict, in the process's grad mode, exported once",
        lay=export_options.lay_export,
    ),
    Key(
        "edge_compile_config",
        Scope.BOTH,
        _FIELDS_TABLE.format(config="EdgeCompileConfig"),
        "`EdgeCompileConfig`'s plain fields, `_check_ir_validity` and `_skip_dim_order` (true "
        "or false), given as `to_edge_transform_and_lower(compile_config=...)`. A target's "
        "fields are laid over the project's, field by field.",
        options.compile_config,
        default={},
        lay=options.lay_fields,
    ),
    Key(
        "executorch_backend_config",
        Scope.BOTH,
        _FIELDS_TABLE.format(config="ExecutorchBackendConfig"),
        "`ExecutorchBackendConfig`'s plain fields, given as `to_executorch(config=...)`: "
        "`emit_stacktrace`, `extract_delegate_segments`, `remove_view_copy`, "
        "`external_constants`, `external_mutable_weights`, `emit_mutable_buffer_names`, "
        "`do_quant_fusion_and_const_prop`, `run_reinplace_pass`, "
        "`enable_non_cpu_memory_planning` (true or false); `segment_alignment`, "
        "`constant_tensor_alignment`, `delegate_alignment` (positive integers). A target's "
        "fields are laid over the project's, field by field.",
        options.compile_config,
        default={},
        lay=options.lay_fields,
    ),
    Key(
        "memory_planning",
        Scope.BOTH,
        "table of `MemoryPlanningPass` arguments",
        "`to_executorch(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(...)))`: "
        "`alloc_graph_input`, `alloc_graph_output`, `alloc_mutable_buffers`, "
        "`share_mutable_buffers`, `allow_lifetime_and_storage_overlap` (true or false), "
        '`alignment` (a positive integer), `memory_planning_algo` (`"greedy"` or `"naive"`, '
        "the function of `executorch.exir.memory_planning` run by a "
        "`MemoryPlanningAlgorithmSuite`). A target's arguments are laid over the project's, one "
        "by one.",
        options.memory_planning,
        default={},
        shown_default="none: ExecuTorch's MemoryPlanningPass()",
        lay=options.lay_fields,
    ),
    Key(
        "sym_shape_eval",
        Scope.BOTH,
        'string, `"hint"` or `"constraint"`',
        "How the emitted program's dynamic shapes are bounded: "
        "`ExecutorchBackendConfig(sym_shape_eval_pass=HintBasedSymShapeEvalPass())` for "
        '`"hint"` (the example inputs\' sizes), `ConstraintBasedSymShapeEvalPass()` for '
        '`"constraint"` (the export\'s upper bounds).',
        values.one_of(tuple(SYM_SHAPE_EVAL_PASSES)),
        shown_default='ExecuTorch\'s, `"constraint"`',
    ),
    Key(
        "transform_passes",
        Scope.TARGET,
        _REFERENCE,
        "A function of no arguments whose return value is passed as "
        "`to_edge_transform_and_lower(transform_passes=...)`. Its file is an input of the "
        "build, and a target with transform passes is always lowered afresh when rebuilt.",
        values.reference,
        shown_default="none",
        located=True,
    ),
    Key(
        "constant_methods",
        Scope.TARGET,
        "table: method name = a boolean, integer, float or string, or an array of them",
        "`to_edge_transform_and_lower(constant_methods=...)`: methods of the program that "
        "return these values.",
        options.constant_methods,
        default={},
    ),
    Key(
        "partitioners",
        Scope.TARGET,
        _REFERENCE,
        "A function returning a list of `Partitioner` instances, used instead of the backends' "
        "own (a partitioner lowerd does not know: Qualcomm's, Arm's, an in-house NPU's). Its "
        "file is an input of the build, and such a target is always lowered afresh when rebuilt "
        "(its blobs still come from the cache).",
        values.reference,
        shown_default="none",
        located=True,
    ),
    Key(
        "whole_program",
        Scope.TARGET,
        "table: `backend_id` (a `BackendDetails` class name), `compile_specs` (a table of strings)",
        "Lowers every method whole to one backend with `backend_api.to_backend(backend_id, "
        "program, [CompileSpec(key, value.encode())])` and calls it from a composite module, "
        "ExecuTorch's documented whole-module lowering. The target sets neither `backends` nor "
        "`partitioners` nor `transform_passes`.",
        options.whole_program,
        shown_default="none",
        located=True,
    ),
    Key(
        "verify",
        Scope.BOTH,
        "boolean",
        "Run the written .pte (with its .ptd) on this host's ExecuTorch runtime after each "
        "build: every method on the entry's example inputs and on `verify_inputs`, each output "
        "compared with the eager module's (a quantized target's with its float model's), the "
        "first diverging op found when one is off, and each method's host latency "
        "([verify.md](verify.md)). `lowerd build` and the editor show it; `lowerd verify` "
        "verifies whatever this says. Turning it on lowers the target afresh.",
        values.flag,
        default=False,
    ),
    Key(
        "verify_inputs",
        Scope.TARGET,
        _REFERENCE,
        "A function of no arguments returning more input tuples to verify with: a list of "
        "tuples (every method) or `{method: [tuples]}`, as `quantize`'s `calibration` does: "
        "real samples, the min and max of each dynamic dimension. Its file is an input of the "
        "build.",
        values.reference,
        shown_default="none: the example inputs only",
        located=True,
    ),
    Key(
        "atol",
        Scope.BOTH,
        "number >= 0",
        "The absolute tolerance of a verified output: it passes when every element has "
        "`|runtime - eager| <= atol + rtol * |eager|` (torch.allclose's rule).",
        values.tolerance,
        shown_default="by dtype: 1e-4 for float32, 1e-2 for float16 and bfloat16, 0 for "
        "integers; 0.1 for a quantized target (against its float model)",
    ),
    Key(
        "rtol",
        Scope.BOTH,
        "number >= 0",
        "The relative tolerance of a verified output (see `atol`).",
        values.tolerance,
        shown_default="by dtype: 1e-3 for float32, 1e-2 for float16 and bfloat16, 0 for "
        "integers; 0.1 for a quantized target",
    ),
    Key(
        "verify_runs",
        Scope.BOTH,
        "whole number >= 0",
        "How many warm runs of each method on its example inputs time its host latency (median "
        "and p90, split by delegate partition and CPU op); 0 measures none. Measured once per "
        "program: `lowerd verify --bench` measures again.",
        values.count,
        default=10,
    ),
    Key(
        "verify_warmup",
        Scope.BOTH,
        "whole number >= 0",
        "Untimed runs of each method before its timed ones.",
        values.count,
        default=2,
    ),
    Key(
        "bundled",
        Scope.BOTH,
        "boolean",
        "Also write `<out_dir>/<target>.bpte`: ExecuTorch's BundledProgram, the program with a "
        "test suite per method (`MethodTestSuite`), one test case (`MethodTestCase`) per input "
        "tuple: the entry's example inputs, then `verify_inputs`' tuples, each with the eager "
        "module's outputs (a quantized target's float model's), so that a device runtime checks "
        "itself (`executorch.devtools.bundled_program`). Byte-identical to "
        "`serialize_from_bundled_program_to_flatbuffer(BundledProgram(...))` as `lowerd "
        "stock-script` writes it out; listed in the result's `data_files`. Turning it on or off "
        "keeps the .pte and writes or removes the .bpte.",
        values.flag,
        default=False,
    ),
    Key(
        "recipe",
        Scope.TARGET,
        "string, a recipe name, or a table: `name`, the recipe's keyword arguments, `calibration` "
        "(a function reference, like `entry`)",
        "One of ExecuTorch's export recipes as the target's whole lowering, byte-identical to "
        "`executorch.export.export(model, example_inputs, ExportRecipe.get_recipe(...))`: any "
        "name its recipe registry knows (`xnnpack_fp32`, `xnnpack_pt2e_int8_dynamic_per_channel`, "
        "`xnnpack_torchao_int8da_int4w_per_tensor`, `coreml_fp16`, ...) or a target recipe "
        "(`ios-arm64-coreml-fp16` is `get_ios_recipe(...)`, `android-arm64-snapdragon-fp16` "
        "`get_android_recipe(...)`). A table's other keys are the recipe's keyword arguments, "
        "checked here (`group_size = 64`). The example inputs are the entry's example args, then "
        "the samples `calibration` returns (only for a recipe with a PT2E quantizer, which "
        "calibrates on all of them). The target sets none of `backends`, `partitioners`, "
        "`whole_program`, `quantize`, `transform_passes`, `edge_compile_config`, "
        "`executorch_backend_config`, `external_constants`, `backend_options`, `export`, "
        "`memory_planning`, `sym_shape_eval`: the recipe says them, and [tool.lowerd]'s values "
        "for them do not reach it.",
        recipes.recipe,
        shown_default="none",
    ),
    Key(
        "runtime",
        Scope.BOTH,
        "table: `ops` (a file: a selective-build op list), `backends` (an array of backend ids, "
        'like `"XnnpackBackend"`)',
        "The runtime the .pte must load on. Without it, this host's: the kernels and backends "
        "ExecuTorch's Python runtime registers. `ops` names the op list of a device runtime's "
        "selective build (the `selected_operators.yaml` ExecuTorch's `gen_oplist` writes, which "
        "`lowerd oplist` writes too, or a `functions.yaml`-style list of `- op:` entries), read "
        "with torchgen's own parser; `backends` the backend ids it registers. Every kernel the "
        "program needs that the runtime lacks is an error at the op's line, every delegate whose "
        "backend it does not register too; `lowerd build` then exits 1. The op list's file is an "
        "input of the build; a change checks the program again and keeps it. A target's keys "
        "are laid over the project's, key by key.",
        runtime_options.runtime_settings,
        default={},
        shown_default="this host's runtime",
        lay=runtime_options.lay_runtime,
    ),
    Key(
        "targets",
        Scope.PROJECT,
        "table: `[tool.lowerd.targets.<name>]`, one per target",
        "What to build: each target's table holds the target keys; `<name>.pte` is written to "
        "`out_dir`, so a name is letters, digits, `_`, `.` and `-`. Targets build in file order.",
        None,
        shown_default="required",
    ),
)


def keys_in(table: Scope) -> tuple[Key, ...]:
    """The keys a [tool.lowerd] (PROJECT) or a target's (TARGET) table takes, in order."""
    return tuple(key for key in KEYS if key.scope.allowed_in(table))


def key_names(table: Scope) -> tuple[str, ...]:
    return tuple(key.name for key in keys_in(table))
