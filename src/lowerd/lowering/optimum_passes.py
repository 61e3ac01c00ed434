"""optimum-executorch's RemovePaddingIdxEmbeddingPass (optimum/executorch/passes/
remove_padding_idx_embedding_pass.py), its code as the recipe's: the reference region_passes.py
compares a user's transform pass with (a module of its own, imported only then: it imports
ExecuTorch)."""

from typing import Any

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass, PassResult


class RemovePaddingIdxEmbeddingPass(ExportPass):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()

    def call(self, graph_module: Any) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.embedding.default:
                if len(node.args) == 3:
                    node.args = (node.args[0], node.args[1])
        graph_module.recompile()
        return PassResult(graph_module, True)
