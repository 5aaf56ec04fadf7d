"""Small language models trained from scratch on a CPU: the demo's target (:mod:`~eaglehead.pretrain.demo_target`)
and draft LMs for real targets (:mod:`~eaglehead.pretrain.draft_lm`), sharing :mod:`~eaglehead.pretrain.core`."""
