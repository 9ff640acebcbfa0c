"""apex's zero_grad rule, shared by its fused optimizers (a mixin before torch.optim.Optimizer)."""


class SetGradNone:
    """``zero_grad()``: the gradients become None with ``self.set_grad_none`` (each optimizer's default, as in
    apex), else torch's zero_grad(); an explicit ``set_to_none`` (which apex's signature lacks, and callers
    such as accelerate pass) is honoured."""

    def zero_grad(self, set_to_none=None):
        if set_to_none is not None:
            super().zero_grad(set_to_none=set_to_none)
        elif self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad()
