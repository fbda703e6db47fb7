"""``Failed to increase node group size`` with each cloud's error: the reason is the cloud's.

cluster-autoscaler wraps a failed resize as ``failed to increase node group size: <cloud
error>`` (executor.go:172), logs ``Failed to scale up: %v`` (static_autoscaler.go:646) and
emits ``Scale-up failed for group %s: %v`` (FailedToScaleUpGroup, executor.go:171). The
errors below are each cloud's wording (GCE's googleapi errors, EC2/ASG error codes and
texts, ARM codes, OCI's and Hetzner's capacity words); names and numbers are invented.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors.autoscaler.lines import LineContext, parse_line

CTX = LineContext(cluster="c1", reference=datetime(2026, 11, 30, tzinfo=UTC))
GROUP = "gpu-pool-a100"

ERRORS = [
    (
        "googleapi: Error 403: Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region "
        "us-central1., quotaExceeded",
        "quota",
    ),
    (
        "googleapi: Error 400: The zone 'projects/ml/zones/us-central1-a' does not have enough "
        "resources available to fulfill the request.  Try a different zone, or try again later.",
        "capacity",
    ),
    (
        "googleapi: Error 403: Required 'compute.instanceGroupManagers.update' permission for "
        "'projects/ml/zones/us-central1-a/instanceGroupManagers/gpu-pool-a100', forbidden",
        "config",
    ),
    (
        "ValidationError: New SetDesiredCapacity value 11 is above max value 10 for the "
        "AutoScalingGroup.",
        "max_size",
    ),
    (
        "AccessDenied: User: arn:aws:sts::123456789012:assumed-role/ca/i-0abc is not authorized "
        "to perform: autoscaling:SetDesiredCapacity on resource: arn:aws:autoscaling:us-east-1",
        "config",
    ),
    (
        "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not "
        "have sufficient p4d.24xlarge capacity in the Availability Zone you requested",
        "capacity",
    ),
    (
        "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU "
        "capacity than your current vCPU limit of 96 allows",
        "quota",
    ),
    (
        'Code="QuotaExceeded" Message="Operation could not be completed as it results in '
        'exceeding approved standardNCADSA100v4Family Cores quota."',
        "quota",
    ),
    (
        'Code="SkuNotAvailable" Message="The requested VM size for resource is currently not '
        "available in location 'eastus'.\"",
        "capacity",
    ),
    ('Code="AllocationFailed" Message="Allocation failed."', "capacity"),
    ('Code="AuthorizationFailed" Message="The client does not have authorization."', "config"),
    ("Out of host capacity.", "capacity"),
    ("server type gx2-16 location fsn1 is not available (resource_unavailable)", "capacity"),
    ("Throttling: Rate exceeded", "other"),
]


@pytest.mark.parametrize(("error", "reason"), ERRORS)
def test_a_failed_resize_is_classified_by_the_clouds_error(error: str, reason: str) -> None:
    lines = (
        "E1130 10:21:02.118400       1 static_autoscaler.go:646] Failed to scale up: failed to "
        f"increase node group size: {error}",
        f"  Warning  FailedToScaleUpGroup  2m  cluster-autoscaler  Scale-up failed for group "
        f"{GROUP}: {error}",
    )
    for line in lines:
        records = parse_line(line, CTX, 1)
        assert isinstance(records, tuple)
        assert [(r.action, r.reason) for r in records] == [("scale_up_failed", reason)], line
    event = parse_line(lines[1], CTX, 1)
    assert isinstance(event, tuple)
    assert event[0].node_group == GROUP
