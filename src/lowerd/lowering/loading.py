"""The stages up to the exported program: load the entry, quantize its methods, export them.

Each is a stage of lowering/stages.py: it reads the build's context and the record before it and
returns a new record. The user's code runs here (the entry, the calibration function, torch.export
tracing their modules), so these run while build.py records the files the build reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lowerd.lowering.entry import LoadedEntry, definition_site, load_entry
from lowerd.lowering.export_call import export_method
from lowerd.lowering.program_fingerprint import fingerprint
from lowerd.lowering.stages import BuildContext, Exported, Loaded
from lowerd.lowering.user_lowering import load_module_passes
from lowerd.project.result import SourceSite
from lowerd.project.source_map import UserFiles


def load(ctx: BuildContext) -> Loaded:
    """The target's entry, called, with the sites editors show its summaries at."""
    ctx.stage("load")
    entry = load_entry(ctx.config, ctx.target)
    return Loaded(
        entry=entry,
        methods=entry.methods,
        entry_site=_entry_site(entry, ctx.user_files),
        module_sites=_module_sites(entry, ctx.user_files),
    )


def module_trees(loaded: Loaded) -> dict[str, dict[str, str]]:
    """Each method's module tree fingerprinted (lowering/module_tree.py), for the build record;
    none for a method whose module is no torch.nn.Module or whose tree cannot be read."""
    from lowerd.lowering.module_tree import module_digests

    trees = {}
    for name, method in loaded.methods.items():
        try:
            trees[name] = module_digests(method.module)
        except Exception:  # a module tree lowerd cannot read: no edited region, no failure
            continue
    return trees


def quantize(ctx: BuildContext, loaded: Loaded) -> Loaded:
    """Each method quantized as the target declares: by ExecuTorch's PT2E flow (new modules),
    or by torchao's quantize_ (the entry's modules, changed in place); a recipe target's by its
    recipe (source transform, then quantize)."""
    if ctx.recipe is not None:
        from lowerd.lowering.recipe import transform_and_quantize

        return transform_and_quantize(ctx, loaded)
    declared = ctx.target.quantize
    if declared is None:
        return loaded
    ctx.stage("quantize")
    if declared.torchao is not None:
        from lowerd.lowering.torchao_quantize import quantize_linears

        config_path = str(ctx.config.path)
        quantize_linears(loaded.methods, declared, config_path, lambda m: ctx.stage("quantize", m))
        return loaded
    from lowerd.lowering.quantize import calibration_samples, quantize_method

    samples = calibration_samples(
        ctx.config, ctx.target, declared.calibration, list(loaded.methods)
    )
    quantized = {}
    for name, method in loaded.methods.items():
        ctx.stage("quantize", name)
        quantized[name] = quantize_method(
            method, declared, samples.get(name), ctx.blame, ctx.target.export
        )
    return replace(loaded, methods=quantized)


def export(ctx: BuildContext, loaded: Loaded) -> Exported:
    """torch.export of each method (a recipe target's as its recipe says), and the fingerprint
    that tells whether the program is the last build's."""
    if ctx.recipe is not None:
        from lowerd.lowering.recipe import export_programs

        programs = export_programs(ctx, loaded.methods)
    else:
        programs = _export_programs(ctx, loaded)
    program = fingerprint(
        programs,
        ctx.target.backends,
        ctx.user_files,
        ctx.target.used_backend_options(),
        ctx.target.lowering_options(),
    )
    return Exported(dict(loaded.methods), programs, program)


def _export_programs(ctx: BuildContext, loaded: Loaded) -> dict[str, Any]:
    """torch.export of each method as the target's [..export] table says."""
    module_passes = load_module_passes(ctx)
    programs = {}
    for name, method in loaded.methods.items():
        ctx.stage("export", name)
        doing = f"torch.export of {name!r} failed"
        programs[name] = export_method(method, ctx.target.export, ctx.blame, doing, module_passes)
    return programs


def _entry_site(entry: LoadedEntry, user_files: UserFiles) -> SourceSite:
    return SourceSite(user_files.display(entry.file), entry.line)


def _module_sites(entry: LoadedEntry, user_files: UserFiles) -> dict[str, SourceSite]:
    """Where each method's module class is defined, for the classes in the user's files (of
    the modules the entry made: a quantized method's module is torch's GraphModule)."""
    sites = {}
    for name, method in entry.methods.items():
        site = definition_site(type(method.module))
        if site[0] is not None and user_files.owns(site[0]):
            sites[name] = SourceSite(
                user_files.display(site[0]), site[1], type(method.module).__name__
            )
    return sites
