"""Which language models exist (the registry) and how they are loaded (hub, local folder, GGUF conversion)."""
