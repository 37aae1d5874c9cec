"""Head roles (the atlas): what each head does, joined from the families' tables and a pass
over the synthetic repeated corpus (induction, duplicate-token, previous-token scores)."""
