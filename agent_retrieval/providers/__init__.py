"""Model providers behind one interface each: embedders (local, Voyage, OpenAI) and chat models."""
