"""What is about a model and not about the workflow: where it comes from and its manifest
(`sources`), GGUF files (`gguf`), the device (`devices`), the loaded model and its routes
(`loaded`, `layer_stream`, `streamed_weights`, `layer_walks`), the hidden states (`extract`).
Nothing here imports `attnscope.pipeline` or `attnscope.analyses`."""
