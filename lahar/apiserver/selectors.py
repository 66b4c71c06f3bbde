"""DEFERRED re-export: label selectors live in `lahar.api.selectors` (API semantics the agent's QoS
configuration shares with the API server). Only agent/qos/config.py still imports them from here
while its owners' work is in flight; remove this module once it imports `lahar.api.selectors`."""

from lahar.api.selectors import LabelSelector, SelectorError, label_selector_from_dict

__all__ = ["LabelSelector", "SelectorError", "label_selector_from_dict"]
