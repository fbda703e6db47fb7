"""Generated stubs of the kubelet's pod-resources v1 API (README.md here says from what, how).

Nothing in this package is edited by hand: ``make proto`` writes it again from ``api.proto``.
"""
