"""The stock script's part for `bundled = true` (project/reproducer.py): each method's test cases
taken from the eager model before anything quantizes it, then ExecuTorch's BundledProgram of the
emitted program and those cases, serialized to <target>.bpte. What lowering/bundle.py does, as a
user writes it with executorch.devtools.bundled_program; no value is pasted into the text."""

from __future__ import annotations

from lowerd.project.config import TargetConfig
from lowerd.project.python_literal import literal

_CASES = """
# bundled = true: each method's test cases, from the eager model before anything quantizes it:
# the example inputs, then {samples_from}, each with the model's outputs.
import copy

from executorch.devtools import BundledProgram
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from executorch.devtools.bundled_program.serialize import (
    serialize_from_bundled_program_to_flatbuffer,
)

verify_samples = {samples}
if not isinstance(verify_samples, dict):
    verify_samples = {{name: verify_samples for name in methods}}
test_suites = []
for name, method in methods.items():
    module, args, kwargs, shapes = inputs(method)
    module = copy.deepcopy(module)  # the calls change nothing export or quantization sees
    calls = [(args, kwargs)]
    calls += [((), s) if isinstance(s, dict) else (s, {{}}) for s in verify_samples.get(name, [])]
    cases = []
    for case_args, case_kwargs in calls:
        with torch.no_grad():
            outputs = module(*case_args, **case_kwargs)
        # inputs flat as the program takes them: the positional ones, then the keyword ones
        cases.append(MethodTestCase(inputs=(case_args, case_kwargs), expected_outputs=outputs))
    test_suites.append(MethodTestSuite(method_name=name, test_cases=cases))
"""

_WRITE = """
bundled = serialize_from_bundled_program_to_flatbuffer(BundledProgram(manager, test_suites))
bpte = OUT / (TARGET + ".bpte")
bpte.write_bytes(bundled)
print(f"{bpte}: sha256 {hashlib.sha256(bundled).hexdigest()}")
"""


def bundle_cases(target: TargetConfig) -> str:
    """The test cases, made right after the entry is called; "" for a target not bundled."""
    if not target.bundled:
        return ""
    reference = target.verify_inputs
    samples = f"load({literal(reference.value)})()" if reference else "{}"
    samples_from = "the tuples verify_inputs returns" if reference else "no more (no verify_inputs)"
    return _CASES.format(samples=samples, samples_from=samples_from)


def bundle_write(target: TargetConfig) -> str:
    """The .bpte written once the program is emitted; "" for a target not bundled."""
    return _WRITE if target.bundled else ""
