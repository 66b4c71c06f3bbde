"""Huawei Ascend NPUs: through `libdcmi.so` by ctypes, else by parsing `npu-smi info`.

No NPU, no driver library and no `npu-smi` is a normal state: `collect()` then answers
`Accelerators(available=False, reason=...)` and never raises.

Numbering follows npu-smi: `NpuDevice.id` is the card id ("NPU" column), `chip` the device id
within the card ("Chip" column); DCMI's (card_id, device_id) are the same two numbers.
The C signatures and struct layouts below are those of Huawei's `dcmi_interface_api.h`."""

from __future__ import annotations

import ctypes
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from ctypes import POINTER, Structure, byref, c_char, c_int, c_uint, c_ulonglong
from dataclasses import dataclass

from lahar.agent.collectors.files import AbsentFor
from lahar.agent.collectors.host import Host
from lahar.rpc.report import Accelerators, NpuDevice

log = logging.getLogger(__name__)

MIB = 1 << 20  # DCMI and npu-smi say "MB" and mean MiB (a 64 GiB HBM reads 65536)

# Where Ascend driver packages install libdcmi.so, tried under the host root when the library
# is given by bare name and the loader's own search (LD_LIBRARY_PATH, ld.so.cache) misses it.
ASCEND_LIBRARY_DIRS = (
    "usr/local/Ascend/driver/lib64/driver",
    "usr/local/Ascend/driver/lib64/common",
    "usr/local/Ascend/driver/lib64",
    "usr/local/dcmi/lib64",
)

DCMI_OK = 0
DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER = -8013
DCMI_ERR_CODE_NOT_SUPPORT = -8255
_NOT_SUPPORTED = frozenset({DCMI_ERR_CODE_NOT_SUPPORT, DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER})

DCMI_UTILIZATION_RATE_AICORE = 2  # input_type of dcmi_get_device_utilization_rate
DCMI_NPU_TYPE = 0  # enum dcmi_unit_type: NPU_TYPE; MCU and CPU units share some cards
MAX_CARD_NUM = 64
MAX_CHIP_NAME_LEN = 32

# dcmi_get_device_health, in the words npu-smi prints for them.
HEALTH_NAMES = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}


class _ChipInfo(Structure):  # struct dcmi_chip_info
    _fields_ = [
        ("chip_type", c_char * MAX_CHIP_NAME_LEN),  # e.g. "Ascend"
        ("chip_name", c_char * MAX_CHIP_NAME_LEN),  # e.g. "910B3", npu-smi's "Name"
        ("chip_ver", c_char * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", c_uint),
    ]


class _HbmInfo(Structure):  # struct dcmi_hbm_info: natural alignment, no packing
    _fields_ = [
        ("memory_size", c_ulonglong),  # total, MB
        ("freq", c_uint),  # MHz
        ("memory_usage", c_ulonglong),  # used, MB
        ("temp", c_int),  # HBM temperature, degrees C
        ("bandwith_util_rate", c_uint),  # percent (the header's spelling)
    ]


class DcmiError(Exception):
    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call} failed with DCMI error {code}")
        self.call = call
        self.code = code


class _Dcmi:
    """The few DCMI calls the collector makes, typed for ctypes."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        self._declare()

    def _declare(self) -> None:
        chip_args = [c_int, c_int]
        signatures: dict[str, list[type]] = {
            "dcmi_init": [],
            "dcmi_get_card_num_list": [POINTER(c_int), POINTER(c_int), c_int],
            "dcmi_get_card_list": [POINTER(c_int), POINTER(c_int), c_int],  # the newer spelling
            "dcmi_get_device_num_in_card": [c_int, POINTER(c_int)],
            "dcmi_get_device_type": [*chip_args, POINTER(c_int)],
            "dcmi_get_device_chip_info": [*chip_args, POINTER(_ChipInfo)],
            "dcmi_get_device_utilization_rate": [*chip_args, c_int, POINTER(c_uint)],
            "dcmi_get_device_hbm_info": [*chip_args, POINTER(_HbmInfo)],
            "dcmi_get_device_power_info": [*chip_args, POINTER(c_int)],
            "dcmi_get_device_temperature": [*chip_args, POINTER(c_int)],
            "dcmi_get_device_health": [*chip_args, POINTER(c_uint)],
        }
        for name, argtypes in signatures.items():
            function = getattr(self.library, name, None)  # older drivers lack some symbols
            if function is not None:
                function.argtypes = argtypes
                function.restype = c_int

    def call(self, name: str, *args: object) -> None:
        function = getattr(self.library, name, None)
        if function is None:
            raise DcmiError(name, DCMI_ERR_CODE_NOT_SUPPORT)
        code = function(*args)
        if code != DCMI_OK:
            raise DcmiError(name, code)

    def has(self, name: str) -> bool:
        return getattr(self.library, name, None) is not None

    def card_ids(self) -> list[int]:
        count = c_int(0)
        cards = (c_int * MAX_CARD_NUM)()
        name = "dcmi_get_card_num_list" if self.has("dcmi_get_card_num_list") else "dcmi_get_card_list"
        self.call(name, byref(count), cards, MAX_CARD_NUM)
        return list(cards[: max(0, min(count.value, MAX_CARD_NUM))])

    def chips_in_card(self, card: int) -> list[int]:
        count = c_int(0)
        self.call("dcmi_get_device_num_in_card", card, byref(count))
        return [chip for chip in range(count.value) if self._is_npu(card, chip)]

    def _is_npu(self, card: int, chip: int) -> bool:
        if not self.has("dcmi_get_device_type"):
            return True  # older libraries count NPU chips only
        unit = c_int(DCMI_NPU_TYPE)
        _unless_unsupported(lambda: self.call("dcmi_get_device_type", card, chip, byref(unit)))
        return unit.value == DCMI_NPU_TYPE

    def read_chip(self, card: int, chip: int) -> NpuDevice:
        info, hbm = _ChipInfo(), _HbmInfo()
        aicore, power, temperature, health = c_uint(0), c_int(0), c_int(0), c_uint(0)
        _unless_unsupported(lambda: self.call("dcmi_get_device_chip_info", card, chip, byref(info)))
        _unless_unsupported(
            lambda: self.call(
                "dcmi_get_device_utilization_rate", card, chip, DCMI_UTILIZATION_RATE_AICORE, byref(aicore)
            )
        )
        _unless_unsupported(lambda: self.call("dcmi_get_device_hbm_info", card, chip, byref(hbm)))
        _unless_unsupported(lambda: self.call("dcmi_get_device_power_info", card, chip, byref(power)))
        _unless_unsupported(lambda: self.call("dcmi_get_device_temperature", card, chip, byref(temperature)))
        health_known = _unless_unsupported(lambda: self.call("dcmi_get_device_health", card, chip, byref(health)))
        return NpuDevice(
            id=card,
            chip=chip,
            model=info.chip_name.decode(errors="replace"),
            aicore_utilization_ratio=aicore.value / 100,
            hbm_used_bytes=hbm.memory_usage * MIB,
            hbm_total_bytes=hbm.memory_size * MIB,
            power_watts=power.value / 10,  # 0.1 W units
            temperature_celsius=float(temperature.value),
            health=health_name(health.value) if health_known else "Unknown",
        )


def _unless_unsupported(read: Callable[[], None]) -> bool:
    """Run a DCMI read; a call this chip does not support leaves its output at zero (False)."""
    try:
        read()
    except DcmiError as exc:
        if exc.code in _NOT_SUPPORTED:
            return False
        raise
    return True


def health_name(code: int) -> str:
    return HEALTH_NAMES.get(code, f"Unknown({code})")


class _Unavailable(Exception):
    """This source cannot be used now; the message is the reason."""


class NpuCollector:
    """Samples every Ascend NPU chip. DCMI is loaded and initialised once and kept; a DCMI error
    drops it (the next collect starts again) and this collect falls back to `npu-smi info`."""

    def __init__(
        self,
        host: Host,
        library_path: str = "libdcmi.so",
        npu_smi: str = "npu-smi",
        npu_smi_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self._absent: AbsentFor[Accelerators] = AbsentFor(clock=clock)  # neither DCMI nor npu-smi: probed again later
        self.library_path = library_path
        self.npu_smi = npu_smi
        self.npu_smi_timeout = npu_smi_timeout
        self._dcmi: _Dcmi | None = None

    def collect(self) -> Accelerators:
        absent = self._absent.cached()
        if absent is not None:
            return absent
        try:
            return self._collect()
        except Exception as exc:  # the contract: a report, never an exception out of collect()
            log.exception("NPU collection failed")
            self._dcmi = None
            return Accelerators(False, f"NPU collection failed: {exc!r}", "dcmi")

    def close(self) -> None:
        """DCMI has no shutdown call; forgetting the session is all there is to do."""
        self._dcmi = None

    def _collect(self) -> Accelerators:
        try:
            return self._collect_dcmi()
        except _Unavailable as exc:
            dcmi_reason = str(exc)
        except DcmiError as exc:
            log.warning("DCMI: %s; falling back to %s", exc, self.npu_smi)
            self._dcmi = None
            dcmi_reason = str(exc)
        try:
            return self._collect_npu_smi()
        except _Unavailable as exc:  # neither is there: not every tick again
            return self._absent.remember(Accelerators(False, f"no Ascend NPU: {dcmi_reason} and {exc}"))

    # ---- DCMI ----

    def _collect_dcmi(self) -> Accelerators:
        dcmi = self._session()
        chips = [(card, chip) for card in dcmi.card_ids() for chip in dcmi.chips_in_card(card)]
        if not chips:
            return Accelerators(False, "DCMI reports no NPU on this node", "dcmi")
        return Accelerators(True, source="dcmi", npus=[dcmi.read_chip(card, chip) for card, chip in chips])

    def _session(self) -> _Dcmi:
        if self._dcmi is None:
            dcmi = _Dcmi(self._load_library())
            try:
                dcmi.call("dcmi_init")
            except DcmiError as exc:
                raise _Unavailable(str(exc)) from None
            self._dcmi = dcmi
        return self._dcmi

    def _load_library(self) -> ctypes.CDLL:
        for candidate in self._library_candidates():
            try:
                return ctypes.CDLL(candidate)
            except OSError as exc:
                log.debug("cannot load %s: %s", candidate, exc)
        raise _Unavailable(f"{self.library_path} not found")

    def _library_candidates(self) -> list[str]:
        if "/" in self.library_path:
            return [self.library_path]
        installed = [self.host.root / folder / self.library_path for folder in ASCEND_LIBRARY_DIRS]
        return [self.library_path, *(str(path) for path in installed if path.is_file())]

    # ---- npu-smi ----

    def _collect_npu_smi(self) -> Accelerators:
        npu_smi = self._find_npu_smi()
        try:
            result = subprocess.run(
                [npu_smi, "info"], capture_output=True, text=True, timeout=self.npu_smi_timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise _Unavailable(f"{self.npu_smi} info timed out after {self.npu_smi_timeout:g}s") from None
        except OSError as exc:
            raise _Unavailable(f"{self.npu_smi} could not run: {exc}") from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()[:200]
            raise _Unavailable(f"{self.npu_smi} info exited with {result.returncode}: {detail}")
        npus = parse_npu_smi_info(result.stdout)
        if not npus:
            raise _Unavailable(f"{self.npu_smi} info lists no NPU")
        return Accelerators(True, source="npu-smi", npus=npus)

    def _find_npu_smi(self) -> str:
        found = shutil.which(self.npu_smi)
        if found is None:
            raise _Unavailable(f"{self.npu_smi} not installed")
        return found


# ---- `npu-smi info` text ----
#
# +---------------------------+---------------+----------------------------------------------------+
# | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
# | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
# +===========================+===============+====================================================+
# | 0     910B3               | OK            | 97.3        41                0    / 0             |
# | 0                         | 0000:C1:00.0  | 12          0    / 0          3404 / 65536         |
# +===========================+===============+====================================================+
#
# Each NPU row is followed by one row per chip, told apart by the Bus-Id in the second cell.
# Inference cards (310P) have no HBM column: their Memory-Usage is the device memory then.
# The process table that follows ("Process id") is not read.

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_USED_OF_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")


@dataclass
class _NpuRow:
    id: int
    name: str
    health: str
    power_watts: float
    temperature_celsius: float


def parse_npu_smi_info(text: str) -> list[NpuDevice]:
    """One NpuDevice per chip row of the `npu-smi info` table; rows that do not parse are skipped."""
    devices: list[NpuDevice] = []
    current: _NpuRow | None = None
    for line in text.splitlines():
        if "Process id" in line:
            break
        cells = _cells(line)
        if len(cells) < 3:
            continue
        if _BUS_ID.match(cells[1]):
            if current is not None and (device := _chip_row(current, cells)) is not None:
                devices.append(device)
        else:
            current = _npu_row(cells) or current
    return devices


def _cells(line: str) -> list[str]:
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return []  # borders (+---+, +===+) and anything that is not a table row
    return [cell.strip() for cell in line[1:-1].split("|")]


def _npu_row(cells: list[str]) -> _NpuRow | None:
    first = cells[0].split()
    figures = cells[2].split()
    if len(first) < 2 or not first[0].isdigit():
        return None  # a header row
    return _NpuRow(
        id=int(first[0]),
        name=first[1],
        health=cells[1],
        power_watts=_number(figures[0]) if figures else 0.0,
        temperature_celsius=_number(figures[1]) if len(figures) > 1 else 0.0,
    )


def _chip_row(npu: _NpuRow, cells: list[str]) -> NpuDevice | None:
    first = cells[0].split()
    figures = cells[2].split()
    if not first or not first[0].isdigit():
        return None
    usages = [(int(used), int(total)) for used, total in _USED_OF_TOTAL.findall(cells[2])]
    hbm = usages[1] if len(usages) > 1 else (usages[0] if usages else (0, 0))
    return NpuDevice(
        id=npu.id,
        chip=int(first[0]),
        model=npu.name,
        aicore_utilization_ratio=_number(figures[0]) / 100 if figures else 0.0,
        hbm_used_bytes=hbm[0] * MIB,
        hbm_total_bytes=hbm[1] * MIB,
        power_watts=npu.power_watts,
        temperature_celsius=npu.temperature_celsius,
        health=npu.health,
    )


def _number(text: str) -> float:
    """npu-smi prints NA or - for a figure the card does not report."""
    try:
        return float(text)
    except ValueError:
        return 0.0
