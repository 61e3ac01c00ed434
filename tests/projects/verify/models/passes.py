"""A transform pass with a bug: it turns hardtanh into relu (a clamp to [-1, 1] into max(x, 0))."""

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass


class HardtanhAsRelu(ExportPass):
    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.hardtanh.default:
            return super().call_operator(exir_ops.edge.aten.relu.default, (args[0],), {}, meta)
        return super().call_operator(op, args, kwargs, meta)


def hardtanh_as_relu():
    return [HardtanhAsRelu()]
