/** Reading a run's SSE stream in the scripts, with the same parser the platform's SSE module ships. */
import * as Sse from "@effect/experimental/Sse"

/** Calls `onEvent` with each run event (the frame's JSON) and the time it arrived, until the stream ends. */
export const forEachRunEvent = async (res: Response, onEvent: (event: any, receivedAt: number) => void) => {
  let receivedAt = 0
  const parser = Sse.makeParser((frame) => {
    if (frame._tag === "Event") onEvent(JSON.parse(frame.data), receivedAt)
  })
  const decoder = new TextDecoder()
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    receivedAt = Date.now()
    parser.feed(decoder.decode(chunk, { stream: true }))
  }
}
