"""The per-pair maps that several analysis families and the API read, in one home.

    head_norms           ||sum_h alpha^h_ij f^h(x_j)|| without an [n, n, d] tensor (norms,
                         probing, views)
    layer_decomposition  a whole layer split into one vector per (query i, key j) at every
                         scope (Kobayashi et al. 2021, 2024), exact against the module
    layer_maps           every scope's map of one layer for one batch, each stage checked
                         (mixing's maps.h5, the views, `attnscope.decompose`)
    propagation          the split carried from the input tokens through every layer
    prediction           the carried split pushed through the LM head to the logits
    scopes               the scope names, importable without torch (the config checks)
    storage              how a map is stored in an HDF5 output: whole, or each row's top k

A family that reads another family's *files* (probing reads mixing's maps.h5) declares it
in its outputs (`Family.needs`); no family imports another family's modules.
"""
