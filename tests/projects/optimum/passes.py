"""optimum-executorch's passes: RemoveRedundantTransposes between its two exports, and
RemovePaddingIdxEmbeddingPass (optimum/executorch/passes/remove_padding_idx_embedding_pass.py)
before partitioning."""

from typing import Any

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass, PassResult
from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes


class RemovePaddingIdxEmbeddingPass(ExportPass):
    def call(self, graph_module: Any) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.embedding.default:
                if len(node.args) == 3:
                    node.args = (node.args[0], node.args[1])
        graph_module.recompile()
        return PassResult(graph_module, True)


def module_passes() -> list[RemoveRedundantTransposes]:
    return [RemoveRedundantTransposes()]


def transform_passes() -> list[RemovePaddingIdxEmbeddingPass]:
    return [RemovePaddingIdxEmbeddingPass()]
