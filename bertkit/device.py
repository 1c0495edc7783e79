"""Where a model runs and in which precision: the one device and precision choice of training and inference.

`--precision auto` is decided for the device that will run, from what the hardware does natively:
- CUDA: bf16 where the GPU computes it natively (compute capability 8.0 and up: Ampere, Hopper, ...); fp16 with
  loss scaling on older GPUs (V100, T4). `torch.cuda.is_bf16_supported()` is not used: it counts emulation.
- CPU: bf16 only where the CPU has native bf16 instructions (`avx512_bf16` or AMX, `amx_bf16`) AND a bf16 matmul
  of a BERT feed-forward shape ([2048×384]·[384×1536]) is measured faster than the fp32 one at start-up; fp32
  otherwise. `torch.ops.mkldnn._is_mkldnn_bf16_supported()` is not used: it is true where bf16 is only emulated
  (several times slower than fp32).
- anything else: fp32.
`--precision tf32` (training only) keeps fp32 weights and activations and runs CUDA matmuls on TF32 tensor cores
(`matmul_precision`: PyTorch's two switches, set for the run and put back after): no mixed precision's casts, numerics
between fp32's and bf16's (a 10-bit mantissa in the matmuls' inputs, fp32 sums); GPUs of compute capability 8.0+.
The choice comes back with its reason and evidence (CPU flags, the two timings), which runs record in versions.json.

Example:
```python
>>> choice = choose_precision("auto", torch.device("cpu"))
>>> choice.precision in ("bf16", "fp32"), choice.reason != ""
(True, True)
```
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field

import torch

from .errors import BertkitError

PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MATMUL_SHAPE = (2048, 384, 1536)  # tokens × hidden × feed-forward: a MiniLM/BERT intermediate projection


@dataclass
class PrecisionChoice:
    precision: str  # fp32, bf16 or fp16
    reason: str
    evidence: dict = field(default_factory=dict)  # cpu_flags, matmul_ms: {fp32, bf16}, gpu, capability

    def to_dict(self) -> dict:
        return asdict(self)


_DECIDED: dict[str, PrecisionChoice] = {}  # the auto choice for this machine's CPU, once per process


def default_device() -> torch.device:
    """The device inference runs on: the first GPU if there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def time_matmul(dtype: torch.dtype, shape=MATMUL_SHAPE, repeats: int = 5) -> float:
    """Milliseconds of one [m×k]·[k×n] matmul in `dtype` on the CPU: the best of `repeats`, after a warm-up."""
    m, k, n = shape
    generator = torch.Generator().manual_seed(0)  # not the global generator: training seeds stay untouched
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(k, n, generator=generator).to(dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def _cpu_choice(flags: set[str], timer) -> PrecisionChoice:
    native = sorted(set(NATIVE_BF16_FLAGS) & flags)
    evidence = {"cpu_flags": native}
    if not native:
        return PrecisionChoice("fp32", "the CPU has no native bf16 (neither avx512_bf16 nor amx_bf16): bf16 would "
                                       "be emulated, several times slower than fp32", evidence)
    ms = {"fp32": round(timer(torch.float32), 3), "bf16": round(timer(torch.bfloat16), 3)}
    evidence["matmul_ms"] = ms
    m, k, n = MATMUL_SHAPE
    timing = f"a [{m}×{k}]·[{k}×{n}] matmul took {ms['bf16']} ms in bf16, {ms['fp32']} ms in fp32"
    if ms["bf16"] < ms["fp32"]:
        return PrecisionChoice("bf16", f"native bf16 ({', '.join(native)}) and {timing}", evidence)
    return PrecisionChoice("fp32", f"the CPU reports {', '.join(native)} but {timing}", evidence)


def _cuda_choice(device: torch.device) -> PrecisionChoice:
    major, minor = torch.cuda.get_device_capability(device)
    evidence = {"gpu": torch.cuda.get_device_name(device), "capability": f"{major}.{minor}"}
    if major >= 8:
        return PrecisionChoice("bf16", f"{evidence['gpu']} (compute capability {major}.{minor}) computes bf16 "
                                       "natively", evidence)
    return PrecisionChoice("fp16", f"{evidence['gpu']} (compute capability {major}.{minor}) has no native bf16; "
                                   "fp16 with loss scaling", evidence)


def _tf32_choice(device: torch.device) -> PrecisionChoice:
    if device.type != "cuda":
        raise BertkitError(f"--precision tf32 needs an NVIDIA GPU (compute capability 8.0+), not a {device.type} "
                           "device; use fp32, bf16 or auto")
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if major < 8:
        raise BertkitError(f"--precision tf32 needs compute capability 8.0+ (Ampere, Hopper, ...); {name} has "
                           f"{major}.{minor}: use fp32, fp16 or auto")
    return PrecisionChoice("tf32", f"requested: fp32 weights and activations, matmuls on {name}'s TF32 tensor cores",
                           {"gpu": name, "capability": f"{major}.{minor}"})


@contextlib.contextmanager
def matmul_precision(precision: str):
    """Where `precision` is tf32: CUDA's fp32 matmuls and convolutions on TF32 tensor cores while the context lasts
    (PyTorch's switches, put back as they were); nothing otherwise."""
    if precision != "tf32":
        yield
        return
    switches = torch.backends.cuda.matmul, torch.backends.cudnn
    before = [s.allow_tf32 for s in switches]
    for s in switches:
        s.allow_tf32 = True
    try:
        yield
    finally:
        for s, value in zip(switches, before, strict=True):
            s.allow_tf32 = value


def choose_precision(requested: str, device: torch.device, flags: set[str] | None = None,
                     timer=time_matmul) -> PrecisionChoice:
    """`requested` checked for `device`, or for 'auto' the precision the hardware runs fastest (module docstring).
    `flags` and `timer` can be given to decide for another CPU (tests)."""
    if requested not in PRECISIONS:
        raise BertkitError(f"--precision must be one of {', '.join(PRECISIONS)}, got {requested!r}")
    if requested == "fp16" and device.type == "cpu":
        raise BertkitError("--precision fp16 needs a GPU; on CPU use bf16, fp32 or auto")
    if requested == "tf32":
        return _tf32_choice(device)
    if requested != "auto":
        return PrecisionChoice(requested, "requested")
    if device.type == "cuda":
        return _cuda_choice(device)
    if device.type == "cpu":
        if flags is not None or timer is not time_matmul:
            return _cpu_choice(cpu_flags() if flags is None else flags, timer)
        if "cpu" not in _DECIDED:  # this machine's answer does not change: time it once per process
            _DECIDED["cpu"] = _cpu_choice(cpu_flags(), timer)
        return _DECIDED["cpu"]
    return PrecisionChoice("fp32", f"no bf16 policy for device type {device.type}")


def check_precision(requested: str, device: torch.device) -> None:
    """Refuse at once a precision `device` cannot run (fp16 on a CPU, tf32 without an Ampere GPU, a mistyped name),
    before a run reads data or loads a model; 'auto' is decided when the run starts (it may time a matmul)."""
    if requested != "auto":
        choose_precision(requested, device)


def autocast(precision: str, device: torch.device, cache: bool = True):
    """The autocast context of `precision` on `device` (no-op for fp32); `cache=False` inside a CUDA graph capture
    (a cached cast would outlive the replay it was made in)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=cache)


def model_precision(choice: PrecisionChoice, requested: str, model) -> PrecisionChoice:
    """`choice` for a model of the families' table (each ran under bf16 autocast, docs/families.md); for one outside
    it, `choice` where `model`'s encoder runs one forward pass under its autocast (`probe_ids`, on the device its
    weights are on); else, where the same pass runs in fp32, fp32 for 'auto' (the reason says why) and for an
    asked-for bf16 or fp16 the error naming the model and what failed (DeBERTa v1's attention adds fp32 biases to
    bf16 projections and fills the mask with fp32's minimum, which overflows bf16 and fp16). Before anything is
    written: a model that fails at its first step would leave a half-written run folder."""
    from .families import family

    if choice.precision not in ("bf16", "fp16") or family(model).known:
        return choice
    error = _probe_error(model, choice.precision)
    if error is None or _probe_error(model, "fp32") is not None:  # a model that fails in fp32 too: not precision's
        return choice
    import transformers

    cause = (f"{type(model).__name__} of transformers {transformers.__version__} cannot run under "
             f"{choice.precision} autocast ({error})")
    if requested == "auto":
        return PrecisionChoice("fp32", f"auto: {cause}", choice.evidence)
    raise BertkitError(f"--precision {requested}: {cause}; use --precision fp32")


def _probe_error(model, precision: str) -> str | None:
    """'ErrorType: message' of one no-grad eval forward of `model`'s encoder under `precision`'s autocast, or None
    where it runs; the model's mode is left as it was."""
    encoder = getattr(model, "base_model", model)
    was_training = encoder.training
    device = next(model.parameters()).device
    ids = probe_ids(model, device)  # [1, 8]
    try:
        with torch.no_grad(), autocast(precision, device):
            encoder.eval()(input_ids=ids, attention_mask=torch.ones_like(ids))
    except RuntimeError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        encoder.train(was_training)
    return None


def probe_ids(model, device: torch.device) -> torch.Tensor:
    """A dummy input for one check forward pass of `model`'s encoder: [1, 8] token ids 1..8 (within its vocabulary)."""
    return torch.arange(8).remainder(model.config.vocab_size - 1).add(1).unsqueeze(0).to(device)  # [1, 8]


def probe_forward(model) -> None:
    """One training-mode forward of `model`'s encoder (`base_model`: whatever the head's input shape) on
    `probe_ids`, leaving every random state and the model's mode as they were: how a model change checks that its
    code is on the model's path."""
    encoder = getattr(model, "base_model", model)
    was_training = encoder.training
    ids = probe_ids(model, next(model.parameters()).device)  # [1, 8]
    with torch.random.fork_rng(devices=[ids.device] if ids.is_cuda else []), torch.no_grad():
        encoder.train()(input_ids=ids, attention_mask=torch.ones_like(ids))
    encoder.train(was_training)
