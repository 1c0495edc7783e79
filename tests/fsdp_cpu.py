"""`python tests/fsdp_cpu.py ARGS` = `bertkit ARGS` with accelerate's FSDP on CPU processes (gloo). Tests only.

accelerate turns FSDP on only for GPU-family backends: with ACCELERATE_USE_CPU its state stays MULTI_CPU (plain
DDP) even when ACCELERATE_USE_FSDP is set. torch's FSDP2 (`fully_shard`) itself runs on CPU over gloo, so this
driver makes accelerate's state report FSDP with the plugin the FSDP_* environment describes (what
`accelerate launch --config_file examples/accelerate/fsdp2.yaml` sets), then runs bertkit's CLI unchanged. What it
exercises is bertkit's FSDP path: the optimizer mapped onto the sharded parameters, clipping, every process
gathering the best model's weights, sharded checkpoints and --resume.

`python tests/fsdp_cpu.py --fault step:7 ARGS` also kills each process at that point (tests/faults.py's points).
"""

import sys

from accelerate import state
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

_init = state.AcceleratorState.__init__


def _fsdp_on_cpu(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.distributed_type == DistributedType.MULTI_CPU:
        plugin = kwargs.get("fsdp_plugin") or FullyShardedDataParallelPlugin()
        if self._mixed_precision != "no":
            plugin.set_mixed_precision(self._mixed_precision)
        self.distributed_type, self.fsdp_plugin = DistributedType.FSDP, plugin


state.AcceleratorState.__init__ = _fsdp_on_cpu

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--fault"]:  # `--fault POINT`: tests/faults.py's crash injection as well
        import faults

        faults.install(args[1])
        args = args[2:]
    from bertkit.cli import main

    sys.exit(main(args))
