"""Where the kernel-log readers look by default: the device, boot id, ``btime``, ``journalctl``.

Plain constants in a module of their own, so that :mod:`gputriage.settings` (loaded
by every command) can default ``[connect.kmsg]`` to them without importing the
readers (:mod:`connectors.xid.kmsg`, :mod:`connectors.xid.journal`: asyncio and the
line parser). The readers import them from here; both names stay importable there.
"""

from __future__ import annotations

from typing import Final

DEVICE: Final = "/dev/kmsg"
BOOT_ID_PATH: Final = "/proc/sys/kernel/random/boot_id"
PROC_STAT: Final = "/proc/stat"
DEFAULT_STATE: Final = "/var/lib/gputriage/kmsg-state.json"
"""Where ``connect kmsg`` keeps its position (a hostPath in the DaemonSet)."""
JOURNALCTL: Final = "journalctl"
