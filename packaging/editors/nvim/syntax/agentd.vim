" Transcript buffers of the agentd plugin (agentd://session/SID).
if exists("b:current_syntax")
  finish
endif

syntax match agentdSeq /^\[\d\+\]/ nextgroup=agentdKind skipwhite
syntax match agentdKind /\S\+\( \(call\|result\|started\|ended\)\)\?/ contained
syntax match agentdHeader /^agentd session .*$/
syntax match agentdMeta /^\(workspace\|state:\) .*$/
syntax match agentdStreaming /^… assistant (streaming)$/
syntax match agentdError /^\[\d\+\] \(tool result error\|turn ended  \(failed\|interrupted\|timed_out\)\|permission deny\).*$/

highlight default link agentdSeq Number
highlight default link agentdKind Statement
highlight default link agentdHeader Title
highlight default link agentdMeta Comment
highlight default link agentdStreaming Special
highlight default link agentdError ErrorMsg

let b:current_syntax = "agentd"
