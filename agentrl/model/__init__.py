"""Primitives of the policy model that both rollout and learning use.

The rollout backends sample from the policy and the learner scores the same tokens again; both
must mean the same distribution. This room holds what they share (the vocabulary generation may
emit) so that neither stage imports the other.
"""

from agentrl.model.vocab import BANNED_LOGIT, banned_token_ids, mask_banned

__all__ = ["BANNED_LOGIT", "banned_token_ids", "mask_banned"]
