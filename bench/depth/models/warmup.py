"""One linear layer: built through the daemon before anything is measured. It imports the
libraries the flows' models use, so that the fork server keeps them warm (worker/libraries.py)
as it would after a user's first build of the model."""

import importlib

import torch

LIBRARIES = (
    "torch._dynamo",  # strict export
    "transformers.integrations.executorch",
    "transformers.models.llama.modeling_llama",
    "executorch.examples.models.llama.source_transformation.custom_kv_cache",
    "executorch.extension.llm.custom_ops.custom_ops",
    "executorch.extension.llm.export.export_passes",
    "torchao.quantization.quant_api",
)


def make():
    for name in LIBRARIES:
        importlib.import_module(name)
    return torch.nn.Linear(4, 4).eval(), (torch.zeros(1, 4),)
