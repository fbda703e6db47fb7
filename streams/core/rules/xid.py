"""``gpu_app_fault`` and ``xid_repeat``: what single XIDs say on their own.

* Application-class XIDs (13, 31, 43, 94...) on a GPU are the workload's fault,
  not the hardware's: one incident per GPU episode, naming the pod(s) bound to
  it. Several pods on one GPU (time-slicing / MPS) are all named as candidates.
* The same fatal XID ``xid_repeat_count`` times within ``xid_repeat_window_seconds``
  on one GPU is failing hardware: escalate. Occurrences closer than
  ``xid_coalesce_seconds`` count once, because two sources (kernel log and
  dcgm-exporter) report the same occurrence.
"""

from __future__ import annotations

from schemas.incidents import Evidence
from streams.core.lifecycle import Step
from streams.core.rules.pods import pod_info
from streams.core.state import GpuTrack, gpu_ref, pods_on, unpack_uuid

APP = "gpu_app_fault"
REPEAT = "xid_repeat"
_RANK = {"info": 0, "ticket": 1, "page": 2}


def on_app(step: Step, gpu_key: str, gpu: GpuTrack, item: Evidence, code: int) -> None:
    config, state = step.config, step.state
    inc = step.find(APP, gpu_key)
    if inc is None:
        inc = step.open(APP, gpu_key, item.event_id, step.now)
        pods = pods_on(state, gpu_key, gpu)
        shared = len(pods) > 1 or bool(state.sharing)
        for key in pods:
            role = "candidate" if shared else "bound"
            step.add_pod(inc, pod_info(key, state.pods.get(key), role))
        if shared:
            inc.attributes["shared_gpu"] = state.sharing or "shared"
    inc.count += 1
    step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu))
    step.add_evidence(inc, item)
    codes = inc.attributes.get("xids", "")
    if str(code) not in codes.split(","):
        inc.attributes["xids"] = f"{codes},{code}" if codes else str(code)
    inc.attributes["count"] = str(inc.count)
    if inc.count >= config.app_fault_escalate_count and inc.severity == "info":
        inc.severity = "ticket"
    step.set_deadline(inc, step.now + config.app_fault_quiet_seconds)
    who = (
        "no pod binding known"
        if not inc.pods
        else ", ".join(f"{p.namespace}/{p.name}" for p in inc.pods.values())
    )
    shared_note = " (shared GPU: candidates)" if "shared_gpu" in inc.attributes else ""
    inc.summary = (
        f"application XID {inc.attributes['xids']} on {unpack_uuid(gpu.uuid) or gpu_key} "
        f"({step.state.node}), {inc.count}x: workload fault, not hardware; "
        f"pods: {who}{shared_note}"
    )
    rule = config.xid.get(code)
    inc.action = (rule.action if rule and rule.action else "Restart the application.") + (
        " The GPU itself is healthy; check the workload's CUDA code and driver compatibility."
    )


def on_fatal(step: Step, gpu_key: str, gpu: GpuTrack, item: Evidence, code: int) -> None:
    config = step.config
    if gpu.fatal is None:
        gpu.fatal = {}
    occurrences = gpu.fatal.get(code)
    if occurrences is None:
        occurrences = gpu.fatal[code] = []
    if any(o.event_id == item.event_id for o in occurrences):
        return
    if occurrences and step.now - occurrences[-1].time.timestamp() < config.xid_coalesce_seconds:
        return
    occurrences.append(item)
    if len(occurrences) > config.xid_repeat_count:
        del occurrences[0]
    subject = f"{gpu_key}/{code}"
    inc = step.find(REPEAT, subject)
    if inc is None:
        first = occurrences[0].time.timestamp()
        if len(occurrences) < config.xid_repeat_count:
            return
        if step.now - first > config.xid_repeat_window_seconds:
            return
        inc = step.open(REPEAT, subject, occurrences[0].event_id, first)
        capped = config.xid.get(code)
        if capped is not None and capped.severity is not None:
            # NVIDIA's codes for parts of older GPUs are ticket-worthy even when
            # repeated; the type's severity ([core]) stays the ceiling.
            inc.severity = min(inc.severity, capped.severity, key=_RANK.__getitem__)
        for earlier in occurrences:
            step.add_evidence(inc, earlier)
        inc.count = len(occurrences) - 1
        for key in pods_on(step.state, gpu_key, gpu):
            step.add_pod(inc, pod_info(key, step.state.pods.get(key), "bound"))
    inc.count += 1
    step.add_evidence(inc, item)
    step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu))
    step.set_deadline(inc, step.now + config.xid_repeat_window_seconds)
    rule = config.xid.get(code)
    name = rule.mnemonic if rule and rule.mnemonic else "fatal XID"
    hours = config.xid_repeat_window_seconds / 3600
    inc.attributes["xid"] = str(code)
    inc.attributes["occurrences"] = str(inc.count)
    inc.summary = (
        f"XID {code} ({name}) {inc.count} times within {hours:g} h on "
        f"{unpack_uuid(gpu.uuid) or gpu_key} ({step.state.node}): failing hardware"
    )
    inc.action = (
        f"Drain {step.state.node} and open a hardware case for this GPU (RMA); "
        "resets will not hold. " + (rule.action if rule and rule.action else "")
    ).strip()
