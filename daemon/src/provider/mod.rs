//! LLM providers: streamed HTTP clients for each wire format and the offline `script` provider (DESIGN §10).
