"""The one place that asks what this machine is: cores, GPUs, CPU flags, OS, torch.

Everything else (the launcher, the ranks, the chapters' plans and their
sentences about the machine) reads a ``Machine``. A ``Machine`` is plain data,
so a test can build one for a machine it is not running on::

    here = machine.this()                       # asked once per process, then kept
    Machine(cores=2, physical_cores=1, gpus=("Tesla T4",))  # Colab, for a unit test
    here.backend(nprocs=2), here.threads_per_rank(2), here.whole_cores
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
from dataclasses import dataclass, field

# The launcher's Machine as JSON, set in every rank it starts: a rank need not ask the GPUs again.
# Named here, not in the launcher's protocol, so that the machine's facts depend on nothing of it.
ENV = "HELPERS_MACHINE"

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 instructions that run bfloat16 natively
FP16_FLAGS = ("avx512_fp16", "amx_fp16")
SHOWN_FLAGS = ("avx2", "avx512f", *BF16_FLAGS, *FP16_FLAGS, "amx_tile")


@dataclass(frozen=True)
class Machine:
    """What every measurement in the book depends on."""

    cores: int
    gpus: tuple[str, ...] = ()
    cpu: str = "unknown CPU"
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    system: str = "Linux"
    torch: str = ""
    python: str = ""
    memory: int = 0  # bytes of RAM; 0 where a profile does not say
    # Cores with their own arithmetic units among the ``cores`` (logical CPUs) this process may use:
    # a cloud "16 vCPU" box is 8 cores with 2 hardware threads each. 0: not known, taken as ``cores``.
    physical_cores: int = 0
    gpu_memory: int = 0  # bytes on the smallest GPU; 0 where there is none or a profile does not say
    # A core's clock as the OS reports it, in GHz (0: not known), and whether that is its maximum
    # (Linux's cpufreq, boost included) or only the clock it shows now (a VM shows its nominal one).
    clock_ghz: float = 0.0
    clock_is_max: bool = False
    cpu_family: str = ""  # vendor and family, "AuthenticAMD 25": what the flags cannot say of the pipes

    def __post_init__(self):
        if not isinstance(self.cores, int) or self.cores < 1:
            raise ValueError(f"a machine has at least one core, got {self.cores!r}")
        if not 0 <= self.physical_cores <= self.cores:
            raise ValueError(f"physical_cores must be 0 (unknown) to cores={self.cores}, got {self.physical_cores!r}")

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    def backend(self, nprocs: int) -> str:
        """NCCL when every local rank can own a GPU, gloo on the CPU otherwise."""
        return "nccl" if 0 < nprocs <= self.n_gpus else "gloo"

    @property
    def loopback(self) -> str:
        return loopback_interface(self.system)

    @property
    def whole_cores(self) -> int:
        """Cores a rank can have to itself: two ranks on one core's two hardware threads share its
        arithmetic units and caches, so they are not two cores' worth of compute."""
        return self.physical_cores or self.cores

    def threads_per_rank(self, local_world_size: int) -> int:
        """Split the cores between the ranks on this host, so they do not fight over them."""
        return max(1, self.cores // max(1, local_world_size))

    def has(self, *flags: str) -> bool:
        """Whether the CPU reports any of these /proc/cpuinfo flags."""
        return any(f in self.cpu_flags for f in flags)

    @property
    def native_bf16(self) -> bool:
        return self.has(*BF16_FLAGS)

    @property
    def native_fp16(self) -> bool:
        return self.has(*FP16_FLAGS)

    @property
    def fp32_flops_per_cycle(self) -> int:
        """A core's float32 FLOPs a cycle, from its vector flags: the widest vector's lanes, x 2 with
        fused multiply-add, x 2 FMA pipes, which x86 server cores have had since Haswell and Zen 2 (the
        flags cannot show the pipes: assumed). AMD's Zen 4 (family 25 with avx512f) runs a 512-bit
        instruction as two 256-bit halves, so it counts 256 bits. 0: no vector flags known."""
        if self.has("avx512f"):
            bits = 256 if self.cpu_family == "AuthenticAMD 25" else 512
        elif self.has("avx2", "avx"):
            bits = 256
        elif self.has("sse2", "asimd"):
            bits = 128
        else:
            return 0
        return bits // 32 * (2 if self.has("fma", "asimd") else 1) * 2

    def flags(self, wanted: tuple[str, ...] = SHOWN_FLAGS) -> dict[str, bool]:
        return {w: w in self.cpu_flags for w in wanted}

    def summary(self) -> dict:
        """The facts a chapter prints at its top, beside its measurements."""
        return {"cpu": self.cpu, "cores": self.cores, "gpus": list(self.gpus), "system": self.system,
                "torch": self.torch, "python": self.python,
                "bf16_flags": [f for f in (*BF16_FLAGS, "amx_tile") if f in self.cpu_flags]}

    def describe(self) -> str:
        """One sentence about this machine, for the prose: glued, never typed."""
        cores = f"{self.cores} CPU core{'s' if self.cores != 1 else ''}"
        if self.whole_cores < self.cores:
            cores = f"{self.cores} CPU threads on {self.whole_cores} core{'s' if self.whole_cores != 1 else ''}"
        if not self.gpus:
            return f"{cores} and no GPU"
        kinds = sorted(set(self.gpus))
        return f"{cores} and {self.n_gpus} GPU{'s' if self.n_gpus != 1 else ''} ({', '.join(kinds)})"


def _cpuinfo() -> dict:
    """Linux's /proc/cpuinfo (the first CPU's lines); on macOS (no such file) the model from platform."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    first = {}
    for key, _, value in (ln.partition(":") for ln in lines):
        first.setdefault(key.strip(), value.strip())
    mhz = float(first.get("cpu MHz") or 0)
    try:  # cpufreq's maximum, in kHz, where the kernel has a frequency driver
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            mhz, is_max = int(f.read()) / 1e3, True
    except (OSError, ValueError):
        is_max = False
    family = " ".join(v for v in (first.get("vendor_id"), first.get("cpu family")) if v)
    return {"cpu": first.get("model name") or platform.processor() or "unknown CPU",
            "cpu_flags": frozenset(first.get("flags", "").split()), "clock_ghz": round(mhz / 1e3, 3),
            "clock_is_max": is_max, "cpu_family": family}


def loopback_interface(system: str = platform.system()) -> str:
    """The loopback interface's name, which GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME take: macOS
    calls it lo0, and gloo refuses a name the system does not have."""
    return "lo0" if system == "Darwin" else "lo"


def physical_cores_in(cpuinfo: str, cpus: set[int]) -> int:
    """The physical cores under ``cpus`` (logical CPU ids) by Linux's /proc/cpuinfo: its distinct
    ("physical id", "core id") pairs; 0 where it lists no "core id" (some VMs and ARM kernels)."""
    pairs = set()
    for block in cpuinfo.split("\n\n"):
        kv = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in block.splitlines() if ":" in ln)}
        if "core id" in kv and kv.get("processor", "").isdigit() and int(kv["processor"]) in cpus:
            pairs.add((kv.get("physical id", "0"), kv["core id"]))
    return len(pairs)


def _physical_cores(cpus: set[int]) -> int:
    """``physical_cores_in`` this machine's /proc/cpuinfo; elsewhere (macOS: sysctl hw.physicalcpu),
    or where it does not say, psutil's count capped at ``cpus``; 0 if neither knows."""
    try:
        with open("/proc/cpuinfo") as f:
            found = physical_cores_in(f.read(), cpus)
    except OSError:
        found = 0
    if found:
        return found
    import psutil
    n = psutil.cpu_count(logical=False)
    return min(n, len(cpus)) if n else 0


def usable_cpus() -> set[int]:
    """The ids of the cores this process may run on (Linux); ``range(cpu_count)`` elsewhere."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """The cores this process may run on: ``taskset -c 0`` makes it 1 (Linux); all of them on macOS."""
    return len(usable_cpus())


# --- How busy the machine was: the other processes' share of its cores ---------------------------

@dataclass(frozen=True)
class Load:
    """Over ``seconds`` of wall time, ``others`` cores' worth of CPU went to processes outside this
    one and its children (and to the hypervisor, as steal), on the ``cores`` this process may use."""

    seconds: float
    others: float
    cores: int

    @property
    def share(self) -> float:
        return self.others / self.cores


def _busy_seconds(cpus: set[int]) -> float:
    """CPU seconds spent on anything but idling, summed over ``cpus`` since boot."""
    import psutil
    times = psutil.cpu_times(percpu=True)
    return sum(sum(t) - t.idle - getattr(t, "iowait", 0.0) for i, t in enumerate(times) if i in cpus)


def _own_seconds() -> float:
    """CPU seconds of this process and every descendant: those alive, and those they have reaped
    (a rank that ended counts in the forkserver that waited for it)."""
    import psutil
    total, me = 0.0, psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


class LoadWatch:
    """How busy other processes kept this machine's cores during a measurement: ``with
    machine.LoadWatch() as w:`` then ``w.load``, or ``w = LoadWatch().start()`` in one cell and
    ``load = w.stop()`` in a later one (a chapter glues what that means for its timings)."""

    def start(self) -> "LoadWatch":
        import time
        self._cpus = usable_cpus()
        self._start = (time.monotonic(), _busy_seconds(self._cpus), _own_seconds())
        return self

    def stop(self) -> Load:
        import time
        t0, busy0, own0 = self._start
        wall = max(time.monotonic() - t0, 1e-9)
        others = (_busy_seconds(self._cpus) - busy0) - (_own_seconds() - own0)
        self.load = Load(seconds=wall, others=max(0.0, others / wall), cores=len(self._cpus))
        return self.load

    def __enter__(self) -> "LoadWatch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def to_json(m: Machine) -> str:
    return json.dumps({**dataclasses.asdict(m), "gpus": list(m.gpus), "cpu_flags": sorted(m.cpu_flags)})


def from_json(text: str) -> Machine:
    fields = json.loads(text)
    return Machine(**{**fields, "gpus": tuple(fields["gpus"]), "cpu_flags": frozenset(fields["cpu_flags"])})


@functools.lru_cache(maxsize=1)
def this() -> Machine:
    """This machine, asked once per process; a rank of ``helpers.launch`` is handed the launcher's.

    Asking for the GPUs' names and memory starts CUDA, which takes seconds on a node of 8 GPUs, and
    every rank would pay it, even a gloo rank that never touches a GPU.
    """
    if os.environ.get(ENV):
        return from_json(os.environ[ENV])
    import psutil
    import torch
    gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    cpus = usable_cpus()
    gpu_memory = min((torch.cuda.get_device_properties(i).total_memory for i in range(len(gpus))), default=0)
    return Machine(cores=len(cpus), gpus=gpus, **_cpuinfo(),
                   system=platform.system(), torch=torch.__version__.split("+")[0],
                   python=platform.python_version(), memory=psutil.virtual_memory().total,
                   physical_cores=_physical_cores(cpus), gpu_memory=gpu_memory)

