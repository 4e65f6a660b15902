/** Workspaces, agents, agent revisions and model profiles (decisions D12). */
import { Schema, SchemaAST } from "effect"

import { RefString, SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"
import { filenameProblem, isMediaType } from "./Files.js"

// ---------------------------------------------------------------------------------------------
// The `scripted` provider's settings (D12): `settings.steps`, each model call takes the next step,
// the last repeats.

export const ScriptedTextStep = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String.annotations({ description: "`{{input}}` is replaced by the run's input text" })
}).annotations({ identifier: "ScriptedTextStep" })

export const ScriptedToolCallStep = Schema.Struct({
  type: Schema.Literal("tool_call"),
  tool: SingleLine.pipe(Schema.minLength(1)).annotations({ description: "The tool's operation name" }),
  input: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "ScriptedToolCallStep" })

export const ScriptedFailStep = Schema.Struct({
  type: Schema.Literal("fail"),
  message: Schema.String
}).annotations({ identifier: "ScriptedFailStep" })

export const ScriptedSleepStep = Schema.Struct({
  type: Schema.Literal("sleep"),
  seconds: Schema.Number.pipe(
    Schema.finite(),
    Schema.positive({ message: () => "must be a positive number of seconds" }),
    Schema.lessThanOrEqualTo(300, { message: () => "must be at most 300 seconds" })
  )
}).annotations({ identifier: "ScriptedSleepStep" })

export const ScriptedFileStep = Schema.Struct({
  type: Schema.Literal("file"),
  filename: Schema.String.pipe(
    Schema.filter((name) => filenameProblem(name) ?? true, {
      jsonSchema: { minLength: 1, maxLength: 255, pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F/\\\\]*$" }
    })
  ),
  content: Schema.String.annotations({ description: "The file's text (stored as UTF-8)" }),
  content_type: Schema.optional(
    Schema.String.pipe(
      Schema.filter((type) => isMediaType(type) || "must be a media type (type/subtype)", {
        jsonSchema: {
          maxLength: 255,
          pattern: "^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(\\s*;\\s*[^\\u0000-\\u001F\\u007F]*)?$"
        }
      })
    )
  ).annotations({ description: "Its media type; `text/plain; charset=utf-8` when omitted" })
}).annotations({
  identifier: "ScriptedFileStep",
  description: "The model's next answer carries this file too: the run stores it (`purpose: run_output`) and emits " +
    "`run.file.created` (`run.file.failed` with `quota_exceeded` when it does not fit `storage_bytes`). Like a sleep, " +
    "it belongs to the call that takes the step after it"
})

export const ScriptedStep = Schema.Union(
  ScriptedTextStep,
  ScriptedToolCallStep,
  ScriptedFailStep,
  ScriptedSleepStep,
  ScriptedFileStep
).annotations({ identifier: "ScriptedStep", jsonSchema: { discriminator: { propertyName: "type" } } })
export type ScriptedStep = typeof ScriptedStep.Type

export const ScriptedSettings = Schema.Struct({
  steps: Schema.NonEmptyArray(ScriptedStep).pipe(
    Schema.filter((steps) =>
      steps[steps.length - 1]!.type === "sleep" || steps[steps.length - 1]!.type === "file"
        ? "the last step cannot be a sleep or a file: the last step repeats, so the model would never answer"
        : undefined
    )
  )
}).annotations({
  identifier: "ScriptedSettings",
  description: "`steps`: each model call takes the next step and the last one repeats, so the last cannot be a `sleep` " +
    "or a `file`"
})
export type ScriptedSettings = typeof ScriptedSettings.Type

// ---------------------------------------------------------------------------------------------
// Resources (fields are ours: the contract does not show them).

const Name = SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200))
const IdRef = RefString

export const Workspace = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("workspace"),
  name: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Workspace" })
export type Workspace = typeof Workspace.Type

export const CreateWorkspace = strictBody(Schema.Struct({ name: Name }).annotations({ identifier: "CreateWorkspace" }))

export const Provider = Schema.Literal("openai", "anthropic", "openai_compatible", "scripted").annotations({
  identifier: "Provider",
  description: "openai: Responses API; anthropic: Messages API; openai_compatible: Chat Completions at " +
    "settings.base_url; scripted: deterministic steps (settings.steps)"
})
export type Provider = typeof Provider.Type

const ProfileSettings = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const ModelProfile = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("model_profile"),
  name: Schema.String,
  provider: Provider,
  model: Schema.String,
  settings: ProfileSettings,
  has_credential: Schema.Boolean.annotations({
    description: "Whether a credential is stored; the credential itself is write-only and never returned"
  }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "ModelProfile" })
export type ModelProfile = typeof ModelProfile.Type

/** `openai_compatible` settings: the Chat Completions base URL. */
export const OpenAiCompatibleSettings = Schema.Struct({
  base_url: SingleLine.pipe(
    Schema.filter((s) => {
      try {
        const u = new URL(s)
        return (u.protocol === "http:" || u.protocol === "https:") && u.hostname.length > 0
      } catch {
        return false
      }
    }, {
      message: () => "must be an http or https URL",
      // what the filter admits, as the document can say it (an absolute http(s) URL with a host)
      jsonSchema: { format: "uri", pattern: "^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\s]" }
    })
  ).annotations({
    description: "The Chat Completions base URL: public `https://` (the destination rules of customer tools), " +
      "unless the operator's `DESTINATION_ALLOWLIST` admits it"
  })
}).annotations({ identifier: "OpenAiCompatibleSettings" })

/** `anthropic` settings: read by the provider (`max_tokens`), anything else kept as given. */
const AnthropicSettings = Schema.Struct(
  {
    max_tokens: Schema.optional(Schema.Number.pipe(Schema.int(), Schema.positive())).annotations({
      description: "The Messages API's `max_tokens` (default 4096)"
    })
  },
  ProfileSettings
).annotations({ identifier: "AnthropicSettings" })

const profileName = Name
const profileModel = SingleLine.pipe(Schema.minLength(1), Schema.maxLength(200))
const profileCredential = Schema.optional(SingleLine.pipe(Schema.minLength(1), Schema.maxLength(8192))).annotations({
  description: "The provider credential (API key). Write-only: stored encrypted (AES-256-GCM), never returned"
})

/** One provider's request, as the document shows it: the provider decides what `settings` must be. */
const profileOf = <P extends Provider, S extends Schema.Schema.Any | Schema.PropertySignature.Any>(
  provider: P,
  settings: S,
  identifier: string
) =>
  Schema.Struct({
    name: profileName,
    provider: Schema.Literal(provider),
    model: profileModel,
    settings,
    credential: profileCredential
  }).annotations({ identifier })

/**
 * CreateModelProfile as the document states it (D12): a union discriminated by `provider`, whose
 * `settings` are what `Agents.checkSettings` decodes for that provider (`ScriptedSettings`,
 * `OpenAiCompatibleSettings`), so a request valid by the document is valid for the service.
 */
export const CreateModelProfileByProvider = Schema.Union(
  profileOf("openai", Schema.optional(ProfileSettings), "CreateOpenAiModelProfile"),
  profileOf("anthropic", Schema.optional(AnthropicSettings), "CreateAnthropicModelProfile"),
  profileOf("openai_compatible", OpenAiCompatibleSettings, "CreateOpenAiCompatibleModelProfile"),
  profileOf("scripted", ScriptedSettings, "CreateScriptedModelProfile")
).annotations({ jsonSchema: { discriminator: { propertyName: "provider" } } })

/**
 * The request the service decodes: `settings` is a record here and checked per provider by the
 * handler (`Agents.checkSettings`), which names the offending step (`settings.steps.N`); the
 * document shows `CreateModelProfileByProvider` in its place (a JSON Schema surrogate).
 */
export const CreateModelProfile = strictBody(
  Schema.Struct({
    name: profileName,
    provider: Provider,
    model: profileModel,
    settings: Schema.optional(ProfileSettings),
    credential: profileCredential
  }).annotations({
    identifier: "CreateModelProfile",
    [SchemaAST.SurrogateAnnotationId]: CreateModelProfileByProvider.ast
  })
)
export type CreateModelProfile = typeof CreateModelProfile.Type

export const Agent = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("agent"),
  workspace_id: Schema.String,
  name: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Agent" })
export type Agent = typeof Agent.Type

export const CreateAgent = strictBody(Schema.Struct({ workspace_id: IdRef, name: Name }).annotations({ identifier: "CreateAgent" }))

export const AgentRevision = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("agent_revision"),
  agent_id: Schema.String,
  model_profile_id: Schema.String,
  instructions: Schema.String,
  tool_ids: Schema.Array(Schema.String),
  memory: Schema.Boolean.annotations({
    description: "Whether its runs are offered the built-in tools `memory_get` and `memory_put` (the workspace's memory)"
  }),
  content_hash: Schema.String.annotations({
    description: "Lowercase hex SHA-256 of the canonical JSON (sorted keys) of {instructions, model_profile_id, tool_ids}, " +
      "with `memory: true` added when memory is on"
  }),
  created_at: Timestamp
}).annotations({ identifier: "AgentRevision", description: "Immutable: there is no update or delete" })
export type AgentRevision = typeof AgentRevision.Type

export const CreateAgentRevision = strictBody(
  Schema.Struct({
    model_profile_id: Schema.optional(IdRef).annotations({
      description: "The model profile the revision pins; default: the environment's `default_model_profile_id` (settings)"
    }),
    instructions: Schema.String.pipe(Schema.maxLength(100_000)),
    tool_ids: Schema.Array(IdRef).annotations({ description: "Tool ids; must be empty until tools exist (issue 5)" }),
    memory: Schema.optional(Schema.Boolean).annotations({
      description: "Offer the built-in tools `memory_get` and `memory_put` (the workspace's memory) to its runs; default false"
    })
  }).annotations({ identifier: "CreateAgentRevision" })
)
export type CreateAgentRevision = typeof CreateAgentRevision.Type
