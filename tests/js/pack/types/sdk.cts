// The same from CommonJS.
import { OpenAI } from "openai";
import { Anthropic } from "@anthropic-ai/sdk";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createFetch, fetch } from "@reprise-dev/client";

const openai = new OpenAI({ baseURL: "http://localhost:8080/v1", apiKey: "sk-...", fetch });
const claude = new Anthropic({ baseURL: "http://localhost:8080", apiKey: "sk-ant-...", fetch: createFetch() });
const provider = createOpenAICompatible({ name: "reprise", baseURL: "http://localhost:8080/v1", fetch });

export { openai, claude, provider };
