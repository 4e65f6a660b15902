/** Workspaces, agents, agent revisions and model profiles (decisions D12). */
import { Schema } from "effect"

import { RefString, SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"

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

export const ScriptedStep = Schema.Union(
  ScriptedTextStep,
  ScriptedToolCallStep,
  ScriptedFailStep,
  ScriptedSleepStep
).annotations({ identifier: "ScriptedStep" })
export type ScriptedStep = typeof ScriptedStep.Type

export const ScriptedSettings = Schema.Struct({
  steps: Schema.NonEmptyArray(ScriptedStep).pipe(
    Schema.filter((steps) =>
      steps[steps.length - 1]!.type === "sleep"
        ? "the last step cannot be a sleep: the last step repeats, so the model would never answer"
        : undefined
    )
  )
}).annotations({ identifier: "ScriptedSettings" })
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

export const CreateModelProfile = strictBody(
  Schema.Struct({
    name: Name,
    provider: Provider,
    model: SingleLine.pipe(Schema.minLength(1), Schema.maxLength(200)),
    settings: Schema.optional(ProfileSettings).annotations({
      description: "Provider-specific: openai_compatible requires base_url (http or https URL); scripted requires " +
        "steps (a non-empty list of ScriptedStep)"
    }),
    credential: Schema.optional(SingleLine.pipe(Schema.minLength(1), Schema.maxLength(8192))).annotations({
      description: "The provider credential (API key). Write-only: stored encrypted (AES-256-GCM), never returned"
    })
  }).annotations({ identifier: "CreateModelProfile" })
)
export type CreateModelProfile = typeof CreateModelProfile.Type

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
    }, { message: () => "must be an http or https URL" })
  )
}).annotations({ identifier: "OpenAiCompatibleSettings" })

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
  content_hash: Schema.String.annotations({
    description: "Lowercase hex SHA-256 of the canonical JSON (sorted keys) of {instructions, model_profile_id, tool_ids}"
  }),
  created_at: Timestamp
}).annotations({ identifier: "AgentRevision", description: "Immutable: there is no update or delete" })
export type AgentRevision = typeof AgentRevision.Type

export const CreateAgentRevision = strictBody(
  Schema.Struct({
    model_profile_id: IdRef,
    instructions: Schema.String.pipe(Schema.maxLength(100_000)),
    tool_ids: Schema.Array(IdRef).annotations({ description: "Tool ids; must be empty until tools exist (issue 5)" })
  }).annotations({ identifier: "CreateAgentRevision" })
)
export type CreateAgentRevision = typeof CreateAgentRevision.Type
