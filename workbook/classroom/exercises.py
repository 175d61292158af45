"""exercises.py — the exercises, one entry a step: which piece of the step the student writes, how it is
checked, its hints, and the classic wrong answers, each with the hint that fits it.

An entry holds no code of the step's. Its piece is named by function: the authoring tool
(workbook/authoring/exercises.py) cuts it out of the step to write exercises/NN_<piece>.py, and the
checker (workbook/classroom/exercise.py) runs the step with the student's piece in its place, up the
grader's rungs, then through any unit check the idea needs. A classic wrong answer is made from the
step's own piece by a few edits (old text -> new text), so the tests can show each fails with its own
hint, whatever the step looks like today.

Every text comes in English and in Chinese ("zh-CN"); the Chinese follows docs/glossary.zh-CN.md.
"""

from __future__ import annotations

from dataclasses import dataclass

LANGS = ("en", "zh-CN")


@dataclass(frozen=True)
class Wrong:
    """A classic wrong answer: how it is made from the step's piece, and how its failure is told apart."""

    what: dict  # lang -> what the wrong answer does, in a few words
    edits: tuple  # (old, new) pairs, applied in turn to the step's piece (each `old` must be there)
    says: str  # a regular expression the first mistake's reason matches when it is this wrong answer
    hint: dict  # lang -> the hint for it


@dataclass(frozen=True)
class Exercise:
    """One exercise: the step's piece the student writes, and how it is checked."""

    number: int
    step: str  # the step's module, e.g. "s06_recovery"
    piece: str  # the step's function the student writes (cut out by name: no marker in the step)
    about: dict  # lang -> the step's idea, one line
    rungs: tuple = ()  # the grader's rungs (workbook/classroom/ladder.py) the step runs up, piece swapped
    args: tuple = ()  # flags the step is started with on the rungs
    replays: tuple = ()  # the step's own fixtures, replayed with the piece swapped (its --replay)
    table: str | None = (
        None  # its unit checks, by name: a truth table, or small conversations (exercise_tables)
    )
    hints: dict | None = None  # lang -> three hints, each more specific
    wrong: tuple = ()
    owner: str | None = None  # the step's class the piece is a method of ("Trace"), or None: a function

    @property
    def qualified(self) -> str:
        """The piece as the step names it: `collapse`, or `Trace.first_new` for a method."""
        return f"{self.owner}.{self.piece}" if self.owner else self.piece


EXERCISES = [
    Exercise(
        1,
        "s01_agent_loop",
        "agent_loop",
        {
            "en": "the loop: call the model, append its reply, run each tool_use, answer it, repeat",
            "zh-CN": "循环本身：调用模型，追加它的回复，执行每个 tool_use 并回答它，再来一轮",
        },
        rungs=("loop",),
        hints={
            "en": [
                "The loop has four stages, one comment each in the TODO. Start with a `while True:` that "
                "calls "
                "client.messages.create with the whole `messages` list.",
                "After each call, append the reply as it came: "
                '{"role": "assistant", "content": response.content}. Stop when stop_reason is not '
                '"tool_use".',
                "For each tool_use block, run_tool(block, settings.workspace) and make one "
                '{"type": "tool_result", "tool_use_id": block.id, "content": output}; put all of them in ONE '
                "user message, then go round again. Return the list of responses.",
            ],
            "zh-CN": [
                "循环有四个阶段，TODO 里每个阶段一行注释。先写一个 `while True:`，每次都把整个 `messages` "
                "列表交给 client.messages.create。",
                '每次调用之后，原样追加回复：{"role": "assistant", "content": response.content}。'
                'stop_reason 不是 "tool_use" 时就停下。',
                "对每个 tool_use block 执行 run_tool(block, settings.workspace)，做一个 "
                '{"type": "tool_result", "tool_use_id": block.id, "content": output}；把它们全部放进同一条 '
                "user 消息，然后再来一轮。返回所有回复组成的列表。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "the reply not appended", "zh-CN": "回复没有追加"},
                (('messages.append({"role": "assistant", "content": response.content})', "pass"),),
                r"did not append the assistant's reply|dropped the assistant's reply",
                {
                    "en": "The model remembers nothing between calls: append its reply to messages, "
                    "verbatim, "
                    "before the tool results. The next request must carry the tool_use ids it answers.",
                    "zh-CN": "模型在两次调用之间什么也不记得："
                    "先把它的回复原样追加到 messages，再追加工具结果。"
                    "下一个请求必须带着它所回答的 tool_use id。",
                },
            ),
            Wrong(
                {"en": "one result for two calls", "zh-CN": "两个调用只有一个结果"},
                (
                    (
                        "output = run_tool(block, settings.workspace)",
                        "results = []  # a fresh list for every call\n"
                        "                output = run_tool(block, settings.workspace)",
                    ),
                ),
                r"has no tool_result|tool_result blocks?; got|expected .*tool_result",
                {
                    "en": "Every tool_use id needs its own tool_result. Make the results list once per turn, "
                    "before the for loop, and add one result for each tool_use block.",
                    "zh-CN": "每个 tool_use id 都要有自己的 tool_result。"
                    "每轮只在 for 循环之前建一次结果列表，"
                    "每个 tool_use block 加一个结果。",
                },
            ),
        ),
    ),
    Exercise(
        2,
        "s02_tools",
        "admit",
        {
            "en": "tools as data: an unknown tool or a bad input is refused before anything runs",
            "zh-CN": "工具即数据：未知的工具、不合格的输入，在执行之前就被拒绝",
        },
        rungs=("tool-errors",),
        hints={
            "en": [
                "admit() answers (decision, refusal): refusal None lets the call run; a string refuses it, "
                "and the model reads that string as an is_error tool_result.",
                "Look the tool up in REGISTRY by block.name: a name it does not hold is refused, naming the "
                "tools there are. Then validate block.input with tool.validate (a JsonSchemaException).",
                'Three checks in order: unknown tool -> ("unknown tool", "error: ..."); invalid input -> '
                '("invalid input", "error: ..."); else return gate(tool, block, permission, ask).',
            ],
            "zh-CN": [
                "admit() 返回 (decision, refusal)：refusal 为 None 就放行；是字符串就拒绝，"
                "模型会以 is_error 的 tool_result 读到这句话。",
                "用 block.name 在 REGISTRY 里查工具：查不到就拒绝，并说出有哪些工具。"
                "然后用 tool.validate 校验 block.input（出错时抛 JsonSchemaException）。",
                '按顺序三道检查：未知工具 -> ("unknown tool", "error: ...")；输入不合格 -> '
                '("invalid input", "error: ...")；否则 return gate(tool, block, permission, ask)。',
            ],
        },
        wrong=(
            Wrong(
                {"en": "an unknown tool not refused", "zh-CN": "未知的工具没有被拒绝"},
                (("if tool is None:", "if tool is None and False:"),),
                r"NoneType|has no attribute 'validate'",
                {
                    "en": "The model may ask for a tool that does not exist. REGISTRY.get(block.name) is "
                    "then "
                    "None: refuse the call with an error that names the tools there are.",
                    "zh-CN": "模型可能要一个不存在的工具。这时 REGISTRY.get(block.name) 是 None："
                    "用一条说出现有工具的错误拒绝这次调用。",
                },
            ),
            Wrong(
                {"en": "the input not validated", "zh-CN": "输入没有校验"},
                (("tool.validate(block.input)", "pass"),),
                r"KeyError|TypeError|missing .*argument",
                {
                    "en": "The model's input may lack a required field: validate it against the tool's "
                    "schema "
                    "(tool.validate) and refuse it with the problem and the schema, so the model can fix it.",
                    "zh-CN": "模型给的输入可能缺少必填字段：用工具的 schema 校验（tool.validate），"
                    "不合格就拒绝，说出问题和 schema，让模型自己改。",
                },
            ),
        ),
    ),
    Exercise(
        3,
        "s03_errors",
        "call_model",
        {
            "en": "one retry layer: what may pass is sent again after a wait; a 4xx never",
            "zh-CN": "一层重试：可能自己过去的错误，等一会儿再发；4xx 永远不重试",
        },
        rungs=("retries", "no-retry-400", "bad-key", "gives-up"),
        hints={
            "en": [
                "Try send(**request) up to retry.attempts times; return the first reply. Catch "
                "anthropic.APIStatusError and anthropic.APIConnectionError.",
                "retry.reason(err) says why an error may pass (a 529, a 429, a lost connection...), or None "
                "when it cannot: then raise it at once. Wait retry.sleep(backoff(attempt, retry.rand)) "
                "between attempts, or what retry-after asks (server_wait).",
                "On the last attempt raise GaveUp(given_up(why, status_of(err), attempt)) from the error, "
                "so the run stops with a non-zero exit instead of retrying for ever.",
            ],
            "zh-CN": [
                "最多尝试 retry.attempts 次 send(**request)；返回第一个成功的回复。捕获 "
                "anthropic.APIStatusError 和 anthropic.APIConnectionError。",
                "retry.reason(err) 说出错误为什么可能自己过去（529、429、连接断了……）；"
                "不可能过去时返回 None：这时立刻 raise。"
                "两次尝试之间等 retry.sleep(backoff(attempt, retry.rand))，"
                "或 retry-after 要求的时间（server_wait）。",
                "最后一次仍失败时 raise GaveUp(given_up(why, status_of(err), attempt))，"
                "让运行以非零退出码停下，而不是无休止地重试。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "a 400 retried", "zh-CN": "400 也重试了"},
                (("if why is None:", "if why is None and False:"),),
                r"answered 4\d\d and your program sent the request again|kept retrying",
                {
                    "en": "A 400 (or 401, 403, 404, 413) fails the same way every time: when "
                    "retry.reason(err) "
                    "is None, raise the error at once; only what may pass is sent again.",
                    "zh-CN": "400（以及 401、403、404、413）每次都会同样失败：retry.reason(err) 为 None 时"
                    "立刻 raise；只有可能自己过去的错误才再发一次。",
                },
            ),
            Wrong(
                {"en": "nothing retried", "zh-CN": "什么都不重试"},
                (("why = retry.reason(err)", "why = None"),),
                r"stopped on the (dropped connection|\d\d\d)",
                {
                    "en": "A 529 (overloaded), a 429 (rate limited) or a dropped connection may pass by "
                    "itself: wait, then send the same request again. Ask retry.reason(err) which ones.",
                    "zh-CN": "529（过载）、429（限流）或断开的连接可能自己过去：等一会儿，再发同一个请求。"
                    "哪些可以，问 retry.reason(err)。",
                },
            ),
        ),
    ),
    Exercise(
        4,
        "s04_parallel",
        "plan",
        {
            "en": "reads together, writes one at a time, in the order asked",
            "zh-CN": "读取一起执行，写入一个一个来，按模型要求的顺序",
        },
        rungs=("parallel",),
        table="plan",
        hints={
            "en": [
                "plan(blocks) groups the calls' indexes, in order: each group runs at once, one group "
                "after another. reads_only(block) says whether a call only reads.",
                "Walk the blocks in order. A read joins the group before it when that group is reads too; "
                "anything else starts a group of its own.",
                "groups = []; for i, block in enumerate(blocks): append i to groups[-1] if this block and "
                "the last one in groups[-1] both read only, else groups.append([i]). Return groups.",
            ],
            "zh-CN": [
                "plan(blocks) 按顺序把调用的下标分组：同一组一起执行，一组执行完再下一组。"
                "reads_only(block) 说明一个调用是否只读。",
                "按顺序走过每个 block。只读的调用，如果前一组也都是只读的，就加入前一组；"
                "其他调用各自单独成组。",
                "groups = []；for i, block in enumerate(blocks)："
                "若这个 block 和 groups[-1] 的最后一个都只读，"
                "就把 i 加进 groups[-1]，否则 groups.append([i])。返回 groups。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "reads serialised, each alone", "zh-CN": "读取被串行化，一个一个执行"},
                (("if reads_only(block) and groups", "if False and groups"),),
                r"reads in a row ran apart",
                {
                    "en": "Reads change nothing, so reads next to each other may run side by side: put a "
                    "read "
                    "in the group before it when that group holds reads only.",
                    "zh-CN": "读取不改变任何东西，所以相邻的读取可以并排执行：前一组全是读取时，"
                    "把这个读取放进前一组。",
                },
            ),
            Wrong(
                {"en": "a write run beside reads", "zh-CN": "写入和读取并排执行"},
                (("if reads_only(block) and groups", "if groups"),),
                r"ran beside other calls",
                {
                    "en": "A write (or bash, or an unknown tool) must run alone: a read beside it could see "
                    "the file before or after the write. Only a read joins a group, and only a group of "
                    "reads.",
                    "zh-CN": "写入（以及 bash、未知工具）必须单独执行："
                    "和它并排的读取可能读到写之前或写之后的文件。"
                    "只有读取才能加入一组，而且只能加入全是读取的组。",
                },
            ),
        ),
    ),
    Exercise(
        5,
        "s05_budget",
        "agent_loop",
        {
            "en": "knowing when to stop: every limit checked before paying for the next call",
            "zh-CN": "知道何时停下：在为下一次调用付钱之前，检查每一个上限",
        },
        rungs=("repeat-brake",),
        replays=("s05_max_steps", "s05_token_budget"),
        hints={
            "en": [
                "It is s04's loop with a stage 0: before each call, budget.exceeded() names the first "
                'limit reached ("" while there is room); then stopped(settings, reason) and return.',
                "After each call, count it: budget.spend(response) (show it with display.show_spend). "
                "When the model ends its turn, stopped(settings, ...) says why too.",
                "The repeat brake: brake = RepeatBrake() before the loop; held = brake.hold_back(calls); "
                "run_tools(calls, settings, held); brake.remember(calls, results); after appending the "
                "results, "
                "if brake.stop: stopped(settings, brake.stop) and return.",
            ],
            "zh-CN": [
                "它就是 s04 的循环加上第 0 阶段：每次调用之前，budget.exceeded() 说出第一个到达的上限"
                '（还有余地时是 ""）；这时 stopped(settings, reason) 并 return。',
                "每次调用之后记账：budget.spend(response)（用 display.show_spend 显示）。"
                "模型结束这一轮时，也用 stopped(settings, ...) 说明原因。",
                "重复调用刹车：循环之前 brake = RepeatBrake()；held = brake.hold_back(calls)；"
                "run_tools(calls, settings, held)；brake.remember(calls, results)；追加结果之后，"
                "若 brake.stop：stopped(settings, brake.stop) 并 return。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "the budget checked after the call", "zh-CN": "调用之后才检查预算"},
                (
                    (
                        "reason = budget.exceeded()\n        if reason:\n            stopped(settings, "
                        "reason)\n"
                        "            return turns\n",
                        "",
                    ),
                    (
                        "turns.append(response)",
                        "reason = budget.exceeded()\n        if reason:\n            stopped(settings, "
                        "reason)\n"
                        "            return turns\n        turns.append(response)",
                    ),
                ),
                r"did not stop when the recording did",
                {
                    "en": "A call is paid once it is made: check the limits at the top of the loop, before "
                    "the call (stage 0), not after it. Checked after, the call over the limit is already "
                    "made.",
                    "zh-CN": "调用一发出就要付钱：在循环顶部、调用之前检查上限（第 0 阶段），而不是调用之后。"
                    "调用之后才查，超出上限的那次调用已经发出去了。",
                },
            ),
            Wrong(
                {"en": "no repeat brake", "zh-CN": "没有重复调用刹车"},
                (("held = brake.hold_back(calls)", "held = {}"),),
                r"same repeated call",
                {
                    "en": "A model can ask for the same call for ever: let the RepeatBrake hold back the "
                    "calls it repeats (brake.hold_back, brake.remember), and stop when brake.stop says so.",
                    "zh-CN": "模型可能无休止地要同一个调用：让 RepeatBrake 拦下重复的调用"
                    "（brake.hold_back、brake.remember），brake.stop 有值时就停下。",
                },
            ),
        ),
    ),
    Exercise(
        6,
        "s06_recovery",
        "next_transition",
        {
            "en": "a reply cut short is sent again, never run: name the transition after each call",
            "zh-CN": "被截断的回复再发一次，绝不执行：每次调用之后说出转移的名字",
        },
        rungs=("streamed-input", "cut-tool-use"),
        table="s06_next_transition",
        hints={
            "en": [
                "Return (transition, why), one of TRANSITIONS. tool_use -> next_turn; any other stop but "
                "max_tokens -> done. Each hint shows the truth table your function is held to: every case, "
                "and its transition.",
                "max_tokens: escalate while state.max_tokens < ESCALATED_MAX_TOKENS, then continue while "
                "state.continuations < MAX_CONTINUATIONS, then fail.",
                "A reply cut by max_tokens is never next_turn, even when it ends in a tool_use: that call's "
                "input may be cut. Check tool_use first, then the three max_tokens cases in that order, then "
                'return ("done", stop).',
            ],
            "zh-CN": [
                "返回 (transition, why)，transition 是 TRANSITIONS 之一。tool_use -> next_turn；"
                "除了 max_tokens 之外的其他 stop_reason -> done。每条提示都列出你的函数要满足的真值表："
                "每一种情况，以及它的转移。",
                "max_tokens：state.max_tokens < ESCALATED_MAX_TOKENS 时 escalate（提高上限），"
                "然后在 state.continuations < MAX_CONTINUATIONS 时 continue（续写），再不行就 fail。",
                "被 max_tokens 截断的回复永远不是 next_turn，哪怕它以 tool_use 结尾："
                "那个调用的输入可能不完整。"
                "先判断 tool_use，再按顺序判断 max_tokens 的三种情况，最后 "
                'return ("done", stop)。',
            ],
        },
        wrong=(
            Wrong(
                {"en": "a cut call run", "zh-CN": "被截断的调用被执行了"},
                (('if stop == "tool_use":', 'if stop in ("tool_use", "max_tokens"):'),),
                r"cut off by max_tokens inside a tool_use",
                {
                    "en": "A reply cut by max_tokens may end in a tool_use whose input is incomplete: never "
                    "run it. The first answer is escalate: the same request again with a larger max_tokens.",
                    "zh-CN": "被 max_tokens 截断的回复，最后一个 tool_use 的输入可能不完整：绝不执行它。"
                    "第一步是 escalate（提高上限）：用更大的 max_tokens 再发同一个请求。",
                },
            ),
            Wrong(
                {"en": "max_tokens taken as the end", "zh-CN": "把 max_tokens 当成了结束"},
                (
                    (
                        'if stop == "tool_use":',
                        'if stop == "max_tokens":\n        return "done", stop\n    if stop == "tool_use":',
                    ),
                ),
                r"stop_reason was max_tokens and your program stopped",
                {
                    "en": "max_tokens is not the model's end: the reply was cut off by the output limit. "
                    "Send the same request again with max_tokens ESCALATED_MAX_TOKENS (escalate); cut again, "
                    "ask it to go on (continue).",
                    "zh-CN": "max_tokens 不是模型结束了这一轮：回复被输出上限截断了。"
                    "用 max_tokens ESCALATED_MAX_TOKENS 再发同一个请求（escalate，提高上限）；"
                    "再被截断，就请它接着写（continue，续写）。",
                },
            ),
            Wrong(
                {"en": "continuations never capped", "zh-CN": "续写没有上限"},
                (("state.continuations < MAX_CONTINUATIONS", "state.continuations >= 0"),),
                r"cut after 3 continuations .*returned 'continue'",
                {
                    "en": "A reply that is cut off every time would be continued for ever, each call paid "
                    "for: after MAX_CONTINUATIONS continuations in a turn, fail, saying why.",
                    "zh-CN": "每次都被截断的回复会被无休止地续写，每次调用都要付钱："
                    "一轮里续写了 MAX_CONTINUATIONS 次之后就 fail，并说明原因。",
                },
            ),
        ),
    ),
    Exercise(
        7,
        "s07_really_done",
        "next_transition",
        {
            "en": "really done? a pause goes on, a refusal ends, the stop hook must pass",
            "zh-CN": "真的结束了吗？暂停的轮接着走，拒绝就结束，stop hook 必须通过",
        },
        rungs=("pause-turn",),
        args=("--web-search",),
        table="s07_next_transition",
        hints={
            "en": [
                "Return (transition, why). Three cases come first: pause_turn, refusal, and a stop hook "
                "that failed (`hook` is None when no hook ran); anything else, return "
                "s06.next_transition(response, state). Each hint shows the truth table your function is "
                "held to.",
                "pause_turn: resume_pause while state.pauses < MAX_PAUSES, then fail. refusal: done (the "
                "why may give its reason: conversation.refusal_reason).",
                "A failed hook (hook and not hook.passed): hook_retry while state.hook_failures < "
                "state.hook_retries, then fail. A hook that passed changes nothing: s06 decides, and the "
                "why can say the hook passed.",
            ],
            "zh-CN": [
                "返回 (transition, why)。先看三种情况：pause_turn、refusal，以及失败的 stop hook"
                "（没有运行钩子时 `hook` 是 None）；其他情况 return s06.next_transition(response, state)。"
                "每条提示都列出你的函数要满足的真值表。",
                "pause_turn：state.pauses < MAX_PAUSES 时 resume_pause，否则 fail。refusal：done"
                "（why 里可以写出拒绝的原因：conversation.refusal_reason）。",
                "钩子失败（hook and not hook.passed）：state.hook_failures < state.hook_retries 时 "
                "hook_retry，否则 fail。钩子通过了就什么都不改：交给 s06 决定，why 里可以说钩子通过了。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "pause_turn taken as the end", "zh-CN": "把 pause_turn 当成了结束"},
                (('stop == "pause_turn"', 'stop == "paused"'),),
                r"pause_turn and your program stopped",
                {
                    "en": "pause_turn is not end_turn: a server tool (web search) paused a long turn. "
                    "resume_pause sends the paused turn back unchanged, with no new user message.",
                    "zh-CN": "pause_turn 不是 end_turn：是服务器端工具（网页搜索）让一个很长的轮暂停了。"
                    "resume_pause 把暂停的那一轮原样送回去，不加新的 user 消息。",
                },
            ),
            Wrong(
                {"en": "a failing stop hook retried without end", "zh-CN": "失败的 stop hook 被无休止地重试"},
                (("state.hook_failures < state.hook_retries", "state.hook_failures >= 0"),),
                r"hook failed (after 2 retries|, no retries allowed) .*returned 'hook_retry'",
                {
                    "en": "A hook that never passes would send the model back for ever: feed its failure "
                    "back only while state.hook_failures < state.hook_retries (--stop-hook-retries), "
                    "then fail.",
                    "zh-CN": "一个永远不通过的钩子会让模型无休止地返工：只有在 state.hook_failures < "
                    "state.hook_retries（--stop-hook-retries）时才把失败送回给模型，否则 fail。",
                },
            ),
        ),
    ),
    Exercise(
        8,
        "s08_full_context",
        "collapse",
        {
            "en": "when the context is full: old tool results collapse to placeholders, every pair whole",
            "zh-CN": "上下文满了：旧的工具结果折叠成占位文字，每一对调用和结果都完整",
        },
        replays=("s06_prompt_too_long_collapse",),
        table="collapse",
        hints={
            "en": [
                "collapse(messages, keep) changes messages in place. In each message of tool results but "
                "the newest `keep` (old_results(messages, keep) gives their indexes), a tool_result of "
                "COLLAPSE_MIN_CHARS characters or more gets a short placeholder as its content. Each hint "
                "shows the cases it is checked on.",
                "Only the content changes: the block stays a tool_result, with its tool_use_id and "
                "is_error, so every tool_use still has its answer. blocks(message) gives a message's "
                "blocks as plain dicts (a copy: put the message back, messages[i] = ...); result_text(b) "
                "a result's text.",
                "The placeholder, word for word as the recordings hold it: "
                'f"[collapsed: {len(result_text(b))} characters of {name} output; call it again if '
                'needed]", where name is the tool its tool_use called (map each tool_use id to its name '
                "first).",
            ],
            "zh-CN": [
                "collapse(messages, keep) 原地修改 messages。除了最新的 `keep` 条之外，"
                "每条装着工具结果的消息里（old_results(messages, keep) 给出它们的下标），"
                "长度不小于 COLLAPSE_MIN_CHARS 的 tool_result 都把内容换成一行占位文字。"
                "每条提示都列出检查用的情况。",
                "只改内容：这个 block 仍然是 tool_result，tool_use_id 和 is_error 都不变，"
                "所以每个 tool_use 仍然有它的回答。blocks(message) 把一条消息的 block 变成普通的 dict"
                "（是副本：改完要放回去，messages[i] = ...）；result_text(b) 给出结果的文字。",
                "占位文字要和录制数据里的一字不差："
                'f"[collapsed: {len(result_text(b))} characters of {name} output; call it again if '
                'needed]"，其中 name 是对应的 tool_use 调用的工具（先把每个 tool_use id 对应到它的名字）。',
            ],
        },
        wrong=(
            Wrong(
                {"en": "the result replaced, its pair broken", "zh-CN": "结果整个被换掉，这一对断了"},
                (
                    (
                        'content[n] = b | {"content": ',
                        'content[n] = {"type": "text", "text": ',
                    ),
                ),
                r"the tool_result for \S+ .* is gone",
                {
                    "en": "Every tool_use must be answered by a tool_result with its id, or the API refuses "
                    'the request: keep the block and change only its content (b | {"content": ...}).',
                    "zh-CN": "每个 tool_use 都要有一个带着它 id 的 tool_result 来回答，"
                    "否则 API 会拒绝这个请求："
                    '保留这个 block，只改它的内容（b | {"content": ...}）。',
                },
            ),
            Wrong(
                {"en": "the newest results collapsed too", "zh-CN": "最新的结果也被折叠了"},
                (("for i in old_results(messages, keep):", "for i in old_results(messages, 0):"),),
                r"one of the newest",
                {
                    "en": "The model is working on its newest results: leave the newest `keep` messages of "
                    "results whole, and collapse only older ones (old_results(messages, keep)).",
                    "zh-CN": "模型正用着最新的结果：最新的 `keep` 条结果消息保持完整，只折叠更旧的"
                    "（old_results(messages, keep)）。",
                },
            ),
            Wrong(
                {"en": "a copy collapsed, not the conversation", "zh-CN": "折叠的是副本，不是对话本身"},
                (('\n        messages[i] = {"role": "user", "content": content}', ""),),
                r"nothing in messages changed",
                {
                    "en": "blocks(message) gives a copy: changing it changes nothing the loop sends. Put the "
                    'message back: messages[i] = {"role": "user", "content": content}.',
                    "zh-CN": "blocks(message) 给的是副本：改它，循环发出去的东西一点没变。要把消息放回去："
                    'messages[i] = {"role": "user", "content": content}。',
                },
            ),
        ),
    ),
    Exercise(
        9,
        "s09_keep_the_work",
        "answer_open_calls",
        {
            "en": "never losing the work: after a stop, every open tool_use is answered, so the run goes on",
            "zh-CN": "不丢掉已做的工作：停下之后，每个还没有回答的 tool_use 都得到回答，运行才能继续",
        },
        table="answer_open_calls",
        hints={
            "en": [
                "A run stopped mid-turn (a Ctrl-C, a limit) may leave tool_use blocks nobody answered, and "
                "the API refuses such a conversation: --resume could not go on. Answer each, and return "
                "whether there were any. Each hint shows the cases it is checked on.",
                "Look at the last message only: if it is the assistant's, collect the ids of its tool_use "
                "blocks. Its content may be the SDK's objects, as a reply holds them: "
                "conversation.plain(message) makes it plain dicts.",
                "Append ONE user message: [tool_result(i, STILL_OPEN, True) for i in ids], in order; "
                "is_error True, as the call never gave a result. Return True; with no call open, append "
                "nothing and return False.",
            ],
            "zh-CN": [
                "在一轮中间停下的运行（Ctrl-C、某个上限）可能留下没人回答的 tool_use block，"
                "API 会拒绝这样的对话：--resume 就没法继续。回答每一个，并返回是否有要回答的。"
                "每条提示都列出检查用的情况。",
                "只看最后一条消息：如果它是 assistant 的，收集它每个 tool_use block 的 id。"
                "它的内容可能是 SDK 的对象，就像回复里那样："
                "conversation.plain(message) 把它变成普通的 dict。",
                "追加一条 user 消息：[tool_result(i, STILL_OPEN, True) for i in ids]，按顺序；"
                "is_error 为 True，因为调用没有给出结果。返回 True；"
                "没有未回答的调用时，什么都不追加，返回 False。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "results split over two messages", "zh-CN": "结果分在两条消息里"},
                (
                    (
                        'messages.append({"role": "user", "content": [tool_result(i, STILL_OPEN, True) '
                        "for i in asked]})",
                        'messages.extend({"role": "user", "content": [tool_result(i, STILL_OPEN, True)]} '
                        "for i in asked)",
                    ),
                ),
                r"came in \d+ user messages",
                {
                    "en": "All the answers to one assistant message go in ONE user message right after it: "
                    "a second user message in a row would leave the first message's other calls unanswered.",
                    "zh-CN": "对同一条 assistant 消息的所有回答，放在紧跟其后的同一条 user 消息里："
                    "分成两条的话，第一条就缺了其余调用的回答。",
                },
            ),
            Wrong(
                {"en": "one result for two calls", "zh-CN": "两个调用只有一个结果"},
                (("for i in asked]", "for i in asked[:1]]"),),
                r"needs its own",
                {
                    "en": "Every open tool_use id needs its own tool_result: one for each tool_use block of "
                    "the last assistant message, in the order asked.",
                    "zh-CN": "每个还没有回答的 tool_use id 都要有自己的 tool_result："
                    "最后一条 assistant 消息里每个 tool_use block 一个，按调用的顺序。",
                },
            ),
            Wrong(
                {"en": "a call that never ran answered as done", "zh-CN": "没执行完的调用被当成成功回答"},
                (("tool_result(i, STILL_OPEN, True)", "tool_result(i, STILL_OPEN)"),),
                r"has is_error",
                {
                    "en": "The call was stopped before it had a result: answer it with is_error True, so the "
                    "model reads it as not done and calls again if it still needs it.",
                    "zh-CN": "这个调用在有结果之前就被停下了：用 is_error True 回答它，"
                    "让模型知道它没有完成，需要的话再调用一次。",
                },
            ),
        ),
    ),
    Exercise(
        10,
        "s10_trace",
        "first_new",
        {
            "en": "a trace: each model_call line logs only the messages new since the line before",
            "zh-CN": "trace：每一行 model_call 只记下上一行之后新出现的消息",
        },
        table="first_new",
        owner="Trace",
        hints={
            "en": [
                "first_new(self, messages) returns the index where `messages` stop being self.logged, the "
                "messages the last model_call line sent: that line then logs messages[index:] only. Each "
                "hint shows the cases it is checked on.",
                "A loop mostly appends: when messages[:len(self.logged)] == self.logged, every logged "
                "message is still there, and the new ones start at len(self.logged) (with nothing logged "
                "yet: 0).",
                "Otherwise the history was rewritten in place (s08's collapse puts a new message where a "
                "result was; compaction starts over): return the index of the first message that is not "
                "the one logged (`is not`), or len(self.logged) if they all are.",
            ],
            "zh-CN": [
                "first_new(self, messages) 返回 `messages` 从哪个下标起不再是 self.logged，"
                "也就是上一行 model_call 发出的那些消息：这一行只记下 messages[下标:]。"
                "每条提示都列出检查用的情况。",
                "循环多数时候只是追加：messages[:len(self.logged)] == self.logged 时，记下过的消息都还在，"
                "新消息从 len(self.logged) 开始（还什么都没记下时是 0）。",
                "否则历史在原地被改写过（s08 的折叠把一条新消息放在原来结果的位置；压缩从头开始）："
                "返回第一条不再是记下的那条消息（`is not`）的下标，都一样时返回 len(self.logged)。",
            ],
        },
        wrong=(
            Wrong(
                {
                    "en": "appends assumed: a rewritten history missed",
                    "zh-CN": "以为只会追加：漏掉了被改写的历史",
                },
                (
                    (
                        "return next((i for i, (a, b) in enumerate(zip(self.logged, messages)) if a is not b)"
                        ", known)",
                        "return known",
                    ),
                ),
                r"was replaced in place",
                {
                    "en": "The loop does not only append: s08's collapse replaces an old result's message in "
                    "place. When the logged messages are not all still there, find the first one that is not "
                    "the one logged, and start the new ones there.",
                    "zh-CN": "循环不只是追加：s08 的折叠会在原地换掉一条旧结果所在的消息。"
                    "记下过的消息不再都在时，找出第一条不再是记下的那条的消息，新消息就从那里开始。",
                },
            ),
            Wrong(
                {"en": "the whole history logged again", "zh-CN": "每次都把整段历史再记一遍"},
                (("return known\n", "return 0\n"),),
                r"log the whole history again",
                {
                    "en": "Index 0 makes every model_call line log the whole conversation again: a long "
                    "run's trace grows with the square of its length. The messages already logged are still "
                    "there: the new ones start after them, at len(self.logged).",
                    "zh-CN": "下标 0 让每一行 model_call 都把整段对话再记一遍："
                    "长的运行，trace 按长度的平方增长。"
                    "记下过的消息都还在：新消息从它们后面开始，也就是 len(self.logged)。",
                },
            ),
            Wrong(
                {"en": "the new length, not the old", "zh-CN": "返回了新的长度，而不是旧的"},
                (("return known\n", "return len(messages)\n"),),
                r"is the length of messages",
                {
                    "en": "The line logs messages[index:]: at len(messages) that is empty, and nothing new "
                    "is ever logged. The new messages start where the logged ones end: len(self.logged).",
                    "zh-CN": "这一行记下的是 messages[下标:]：下标是 len(messages) 时它是空的，"
                    "新消息永远记不下来。新消息从记下的消息结束的地方开始：len(self.logged)。",
                },
            ),
        ),
    ),
    Exercise(
        11,
        "s11_handoff",
        "what_it_did",
        {
            "en": "a fresh session: what the old one did, read from its calls and results, not its words",
            "zh-CN": "开新会话：旧会话做过的事，从它的工具调用和结果里读出，而不是从它说的话里",
        },
        table="what_it_did",
        replays=("s05_handoff",),
        hints={
            "en": [
                "what_it_did(messages) turns a saved conversation into four lines of fact for a fresh "
                "session: the files it changed, the commands it ran, the calls that failed or were refused, "
                "and its last words. The model's account is what drifted: read the facts from the tool_use "
                "blocks and the tool_result answering each (by tool_use_id). Each hint shows the cases it "
                "is checked on.",
                "First map each tool_use_id to its tool_result (blocks(m) gives a message's blocks as "
                "dicts). Then, for each tool_use: a result with is_error goes under the failed calls "
                "(call_label, and the result's first line); a write_file or edit_file counts one write to "
                "its path; a bash call is listed with how it ended, its result's last line without the "
                "brackets.",
                "Join four lines: 'Files it changed: ' with each path and its count ('a.py (1 write)', "
                "'c.toml (3 writes)') or 'none'; 'Commands it ran:' + listed(commands); 'Calls that failed "
                "or were refused:' + listed(failed); 'Its last words: ' + clipped(last_words(messages), "
                "600), or '(none)'.",
            ],
            "zh-CN": [
                "what_it_did(messages) 把一段保存下来的对话变成给新会话的四行事实：改过的文件、执行过的命令、"
                "失败或被拒绝的调用，以及它的最后一段话。跑偏的正是模型自己的说法：事实要从 tool_use block "
                "和回答它的 tool_result（按 tool_use_id 对应）里读。每条提示都列出检查用的情况。",
                "先把每个 tool_use_id 对应到它的 tool_result（blocks(m) 把一条消息的 block 变成 dict）。"
                "然后看每个 tool_use：结果带 is_error 的，归入失败的调用（call_label，加上结果的第一行）；"
                "write_file 或 edit_file 给它的路径记一次写入；bash 调用连同它的结局一起列出，"
                "结局是结果的最后一行，去掉方括号。",
                "拼成四行：'Files it changed: ' 加上每个路径和次数（'a.py (1 write)'、"
                "'c.toml (3 writes)'），没有就是 'none'；'Commands it ran:' + listed(commands)；"
                "'Calls that failed or were refused:' + listed(failed)；"
                "'Its last words: ' + clipped(last_words(messages), 600)，没有就是 '(none)'。",
            ],
        },
        wrong=(
            Wrong(
                {"en": "a refused write counted as a change", "zh-CN": "被拒绝的写入被算成了改动"},
                (('if result.get("is_error"):', "if False:  # is_error not looked at"),),
                r"failed \(is_error\)",
                {
                    "en": "A call whose result has is_error did nothing: a refused write changed no file. "
                    "Look at the result first, and list such a call under the calls that failed.",
                    "zh-CN": "结果带 is_error 的调用什么也没做：被拒绝的写入没有改动任何文件。"
                    "先看结果，把这样的调用归入失败的调用。",
                },
            ),
            Wrong(
                {
                    "en": "a command's first line taken for how it ended",
                    "zh-CN": "把命令输出的第一行当成了结局",
                },
                (("said[-1].strip('[]')", "said[0]"),),
                r"last line of its result",
                {
                    "en": "bash's result ends in a line that says how the command ended, [exit code N]: "
                    "take the result's last line, without the brackets, not its first.",
                    "zh-CN": "bash 的结果以一行说明命令如何结束的文字收尾，[exit code N]："
                    "取结果的最后一行，去掉方括号，而不是第一行。",
                },
            ),
            Wrong(
                {"en": "each file counted once", "zh-CN": "每个文件只算一次"},
                (
                    (
                        'changed.get(str(given.get("path")), 0) + 1',
                        "1",
                    ),
                ),
                r"counted once",
                {
                    "en": "Count every write to a path: a file written three times is what a run going "
                    "round in circles looks like, and the fresh session should know it.",
                    "zh-CN": "每次写入都要计数：一个文件被写了三次，"
                    "正是运行在原地打转的样子，新会话应该知道。",
                },
            ),
        ),
    ),
]

BY_NUMBER = {exercise.number: exercise for exercise in EXERCISES}
