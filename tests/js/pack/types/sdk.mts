// The helper's fetch is the fetch option of each SDK it is for.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { streamText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createFetch, fetch } from "@reprise-dev/client";

const openai = new OpenAI({ baseURL: "http://localhost:8080/v1", apiKey: "sk-...", fetch });
const claude = new Anthropic({ baseURL: "http://localhost:8080", apiKey: "sk-ant-...", fetch: createFetch({ maxAttempts: 4 }) });
const provider = createOpenAICompatible({ name: "reprise", baseURL: "http://localhost:8080/v1", apiKey: "sk-...", fetch });
const result = streamText({ model: provider.chatModel("gpt-4o-mini"), prompt: "hi" });
// The helper wraps a fetch of the SDK's kind as well.
const wrapped = createFetch({ fetch: globalThis.fetch });

export { openai, claude, result, wrapped };
