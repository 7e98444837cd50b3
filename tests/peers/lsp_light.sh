#!/bin/bash
# A light fake language server (LSP base protocol on stdio), for counting many sessions at
# once: a bash process costs a few hundred KiB of its own, a Python fake ten MiB.
# Answers `initialize` (no capabilities) and `shutdown` (null), any other request -32601;
# ignores notifications; `exit` exits 0. Expects compact JSON whose first "id" is the
# message's own (what the supervisor sends).
export LC_ALL=C
length=0
while IFS= read -r line; do
    line=${line%$'\r'}
    if [[ $line == Content-Length:* ]]; then
        length=${line#*:}
        length=${length// /}
    elif [[ -z $line ]]; then
        IFS= read -r -N "$length" body || exit 1
        id=
        if [[ $body =~ \"id\":(\"[^\"]*\"|[0-9]+) ]]; then
            id=${BASH_REMATCH[1]}
        fi
        case $body in
            *'"method":"initialize"'*) reply='{"jsonrpc":"2.0","id":'$id',"result":{"capabilities":{}}}' ;;
            *'"method":"shutdown"'*) reply='{"jsonrpc":"2.0","id":'$id',"result":null}' ;;
            *'"method":"exit"'*) exit 0 ;;
            *)
                [[ -z $id || $body == *'"result"'* || $body == *'"error"'* ]] && continue
                reply='{"jsonrpc":"2.0","id":'$id',"error":{"code":-32601,"message":"not found"}}'
                ;;
        esac
        printf 'Content-Length: %d\r\n\r\n%s' "${#reply}" "$reply"
    fi
done
