# fish completion for mq: mq-send mq-recv mq-ack mq-replay mq-lag mq-purge
# mq-topic, in one file; `make install` puts it in place as mq-send.fish
# and links the others to it, since fish loads a command's completions by
# its name.  Topic and group names are read with `mq-topic list` and
# `mq-topic show`, from the database named on the command line (-d, --db)
# or the default one; when that fails, names are not completed.

# The words of the command line before the cursor, up to a "--".
function __mq_words
    for w in (commandline -opc)[2..-1]
        test "$w" = -- && return
        printf '%s\n' $w
    end
end

# -d DB for mq-topic, when the command line names a database.
function __mq_dbargs
    set -l db
    set -l next 0
    for w in (__mq_words)
        if test $next = 1
            set db $w
            set next 0
            continue
        end
        switch $w
            case -d --db
                set next 1
            case '--db=*'
                set db (string replace -- --db= '' $w)
            case '-d?*'
                set db (string sub -s 3 -- $w)
        end
    end
    test -n "$db" && printf '%s\n' -d (string replace -r '^~/' "$HOME/" -- $db)
end

function __mq_topics
    mq-topic (__mq_dbargs) list 2>/dev/null
end

# __mq_groups [TOPIC]: the groups of TOPIC, or of every topic.
function __mq_groups
    set -l db (__mq_dbargs)
    set -l topics $argv[1]
    test -n "$topics" || set topics (mq-topic $db list 2>/dev/null)
    for t in $topics
        mq-topic $db show $t 2>/dev/null | sed -n 's/^group \([^:]*\):.*/\1/p'
    end | sort -u
end

# The operands so far: words that are neither options nor their arguments
# (the options of this command that take one are in $argv).
function __mq_operands
    set -l skip 0
    for w in (__mq_words)
        if test $skip = 1
            set skip 0
        else if string match -q -- '-*' $w
            contains -- $w $argv && set skip 1
        else
            printf '%s\n' $w
        end
    end
end

# __mq_nop N OPTS...: N operands so far (the next one is operand N + 1).
function __mq_nop
    set -l n $argv[1]
    test (count (__mq_operands $argv[2..-1])) -eq $n
end

# mq-recv ... -- COMMAND: the command line after "--".
function __mq_dashdash
    contains -- -- (commandline -opc)
end

function __mq_command
    set -l words (commandline -opc)
    set -l i (contains -i -- -- $words)
    complete -C (string join ' ' -- (string escape -- $words[(math $i + 1)..-1]) (commandline -ct))
end

set -l times now today yesterday

for p in mq-send mq-recv mq-ack mq-replay mq-lag mq-purge mq-topic
    complete -c $p -f
    complete -c $p -n 'not __mq_dashdash' -s d -l db -r -F -d 'the database: a file or a PostgreSQL URL'
    complete -c $p -n 'not __mq_dashdash' -s h -l help -d 'print the help'
    complete -c $p -n 'not __mq_dashdash' -s V -l version -d 'print the version'
end

# mq-send TOPIC [MESSAGE...]
set -l a -d --db -H --header -k --key --delay --at --linger --dedup --dedup-field
complete -c mq-send -n "__mq_nop 0 $a" -a '(__mq_topics)' -d topic
complete -c mq-send -s 0 -l null -d 'read NUL-terminated records'
complete -c mq-send -s e -l escapes -d 'decode C escapes in each message'
complete -c mq-send -s H -l header -x -d 'give the messages header NAME'
complete -c mq-send -s k -l key -x -d 'give the messages KEY'
complete -c mq-send -s q -l quiet -d 'print no offsets'
complete -c mq-send -l replace -d 'with -k: settle earlier ones of KEY not yet out'
complete -c mq-send -l ttl -x -d 'no group hands it out DUR after it is sent'
complete -c mq-send -l whole -d 'read all of stdin as one message'
complete -c mq-send -l delay -x -d 'deliver no earlier than DUR from now'
complete -c mq-send -l at -x -a "$times" -d 'deliver no earlier than TIME'
complete -c mq-send -l linger -x -d 'let a batch wait DUR for more'
complete -c mq-send -l dedup -x -d 'drop the message if ID came within the window'
complete -c mq-send -l dedup-field -x -d 'take the dedup id from tab field N'
complete -c mq-send -l from-outbox -r -F -d "move the rows of APPDB's outbox table into mq"
complete -c mq-send -s f -l follow -d 'with --from-outbox: keep moving new rows'

# mq-recv TOPIC ... [-- COMMAND [ARG...]]
set -l a -d --db -g --group -j --jobs -n --count -w --wait --lease --format --from --timeout --max-time
set -l r 'not __mq_dashdash'
complete -c mq-recv -n "$r; and __mq_nop 0 $a" -a '(__mq_topics)' -d topic
complete -c mq-recv -n "$r; and not __mq_nop 0 $a" -a '(__mq_topics)' -d 'another topic, a lane after it'
complete -c mq-recv -n "$r; and not __mq_nop 0 $a" -a -- -d 'then a command to run per message'
complete -c mq-recv -n __mq_dashdash -x -a '(__mq_command)'
complete -c mq-recv -n $r -s 0 -l null -d 'NUL-terminated output'
complete -c mq-recv -n $r -s A -l auto-ack -d 'ack each message as it is printed'
complete -c mq-recv -n $r -s f -l follow -d 'keep waiting for messages until a signal'
complete -c mq-recv -n $r -l format -x -d 'print each message as FMT'
complete -c mq-recv -n $r -l from -x -a 'earliest latest' -d 'where a new group starts'
complete -c mq-recv -n $r -s g -l group -x -a "(__mq_groups (__mq_operands $a)[1])" -d 'the consumer group'
complete -c mq-recv -n $r -s j -l jobs -x -d 'run up to N commands at once'
complete -c mq-recv -n $r -l json -d 'print JSON lines'
complete -c mq-recv -n $r -l lease -x -d 'lease the messages for DUR'
complete -c mq-recv -n $r -s n -l count -x -d 'receive up to N messages (0: all ready)'
complete -c mq-recv -n $r -s w -l wait -x -d 'wait up to DUR for a message'
complete -c mq-recv -n $r -l timeout -x -d 'stop a command that runs longer'
complete -c mq-recv -n $r -l max-time -x -d 'take no message after DUR'
complete -c mq-recv -n $r -l empty-ok -d 'exit 0, not 1, when nothing came'
complete -c mq-recv -n $r -l fair -d 'take from the topics in turn, not in order'
complete -c mq-recv -n $r -s v -l verbose -d 'a line per message a command settled'

# mq-ack [RECEIPT...]: receipts are not completed
complete -c mq-ack -l dead -d 'make the messages dead letters now'
complete -c mq-ack -l delay -x -d 'with --fail: deliver again after DUR'
complete -c mq-ack -l extend -x -d 'extend the lease to DUR from now'
complete -c mq-ack -l fail -d 'the delivery failed: deliver it again later'
complete -c mq-ack -l reason -x -d 'with --fail or --dead: why'

# mq-replay TOPIC
set -l a -d --db -g --group -H --header -k --key -n --count --from-offset --to-offset --since --until --format --shift --offset --trace
complete -c mq-replay -n "__mq_nop 0 $a" -a '(__mq_topics)' -d topic
complete -c mq-replay -s 0 -l null -d 'NUL-terminated output'
complete -c mq-replay -l dead -d "redrive the group's dead letters"
complete -c mq-replay -l dry-run -d 'with -g: say what would change'
complete -c mq-replay -l earliest -d 'move the group to the oldest message'
complete -c mq-replay -s f -l follow -d 'keep printing new messages'
complete -c mq-replay -l format -x -d 'print each message as FMT'
complete -c mq-replay -l from-offset -x -d 'read (or move the group) from offset N'
complete -c mq-replay -s g -l group -x -a "(__mq_groups (__mq_operands $a)[1])" -d 'move, or redrive the dead letters of, GROUP'
complete -c mq-replay -l json -d 'print JSON lines'
complete -c mq-replay -s H -l header -x -d 'read only messages with this header'
complete -c mq-replay -s k -l key -x -d 'read only messages with KEY'
complete -c mq-replay -l latest -d 'move the group past the last message'
complete -c mq-replay -s n -l count -x -d 'print at most N messages'
complete -c mq-replay -l offset -x -d 'with --dead: only the one at offset N'
complete -c mq-replay -l shift -x -d 'move the group by N messages'
complete -c mq-replay -l since -x -a "$times" -d 'read from the first message sent at TIME'
complete -c mq-replay -l to-offset -x -d 'read up to offset N'
complete -c mq-replay -l trace -x -d 'trace the message at OFFSET'
complete -c mq-replay -l until -x -a "$times" -d 'read up to the last message sent at TIME'

# mq-lag [TOPIC [GROUP]]
set -l a -d --db -k --key -n --from-offset --to-offset --state --max-lag --max-age --max-dead --max-expired --max-silence --max-idle
complete -c mq-lag -n "__mq_nop 0 $a" -a '(__mq_topics)' -d topic
complete -c mq-lag -n "__mq_nop 1 $a" -a "(__mq_groups (__mq_operands $a)[1])" -d group
complete -c mq-lag -l consumers -d 'list the registered consumers'
complete -c mq-lag -l from-offset -x -d '--messages from offset N on'
complete -c mq-lag -l json -d 'print JSON'
complete -c mq-lag -s k -l key -x -d '--messages sent with KEY'
complete -c mq-lag -l max-age -x -d "limit the oldest message's age"
complete -c mq-lag -l max-dead -x -d 'limit the dead letters'
complete -c mq-lag -l max-expired -x -d 'limit the expired leases'
complete -c mq-lag -l max-lag -x -d 'limit the lag'
complete -c mq-lag -l max-silence -x -d 'limit the time since the last send'
complete -c mq-lag -l max-idle -x -d 'limit the time a backlog goes unsettled'
complete -c mq-lag -l wide -d 'every column, even if all 0'
complete -c mq-lag -l messages -d "list a group's messages by state"
complete -c mq-lag -s n -x -d 'at most N --messages'
complete -c mq-lag -l prometheus -d 'print Prometheus metrics'
complete -c mq-lag -s q -l quiet -d 'print only the breaches'
complete -c mq-lag -l state -x -a 'pending inflight expired retry dead' -d '--messages in these states'
complete -c mq-lag -l to-offset -x -d '--messages up to offset N'
complete -c mq-lag -l topics -d 'one row per topic'
complete -c mq-lag -l watch -d 'redraw the table every DUR (--watch=DUR; 2s)'

# mq-purge [TOPIC]
set -l a -d --db -g --group --older-than --before-offset
complete -c mq-purge -n "__mq_nop 0 $a" -a '(__mq_topics)' -d topic
complete -c mq-purge -l before-offset -x -d 'delete the messages below offset N'
complete -c mq-purge -l dead -d 'also drop dead letters'
complete -c mq-purge -s f -l force -d 'delete messages not every group settled'
complete -c mq-purge -s g -l group -x -a "(__mq_groups (__mq_operands $a)[1])" -d "with --dead: only GROUP's"
complete -c mq-purge -s n -l dry-run -d 'count, delete nothing'
complete -c mq-purge -l older-than -x -d 'delete the messages sent over DUR ago'
complete -c mq-purge -s q -l quiet -d 'print nothing but errors and warnings'
complete -c mq-purge -l vacuum -d 'give the free space back to the system'

# mq-topic COMMAND ...
set -l a -d --db --lease --max-attempts --backoff --from --pause --timeout --idempotent-by --idempotent-window --rate --per-key -g --group -k --key --dedup --at --delay
set -l sub "__mq_nop 0 $a"
complete -c mq-topic -n $sub -a create -d 'create a topic'
complete -c mq-topic -n $sub -a list -d 'list the topics'
complete -c mq-topic -n $sub -a show -d 'show a topic and its groups'
complete -c mq-topic -n $sub -a set -d 'change settings of a topic'
complete -c mq-topic -n $sub -a delete -d 'delete a topic'
complete -c mq-topic -n $sub -a group -d 'create or configure a consumer group'
complete -c mq-topic -n $sub -a group-delete -d 'delete a consumer group'
complete -c mq-topic -n $sub -a cancel -d 'settle messages as cancelled'
complete -c mq-topic -n $sub -a delay -d 'make messages due at another time'
complete -c mq-topic -n $sub -a backup -d 'copy the database to a new file'
complete -c mq-topic -n $sub -a outbox-init -d 'make the outbox table in an application database'
set -l is "__fish_seen_subcommand_from"
complete -c mq-topic -n "$is show set delete group group-delete cancel delay; and __mq_nop 1 $a" -a '(__mq_topics)' -d topic
complete -c mq-topic -n "$is group group-delete; and __mq_nop 2 $a" -a "(__mq_groups (__mq_operands $a)[2])" -d group
complete -c mq-topic -n "$is create set; and not __mq_nop 1 $a" -a 'retention= dedup-window= max-size= paused= ttl=' -d setting
complete -c mq-topic -s f -l force -d 'delete even what groups have not settled'
complete -c mq-topic -n "$is group" -l lease -x -d 'lease deliveries for DUR (30s)'
complete -c mq-topic -n "$is group" -l max-attempts -x -d 'dead letter after N deliveries'
complete -c mq-topic -n "$is group" -l backoff -x -d 'waits before each retry'
complete -c mq-topic -n "$is group" -l ordered -d 'one at a time per key'
complete -c mq-topic -n "$is group" -l unordered -d 'in parallel whatever the key'
complete -c mq-topic -n "$is group" -l from -x -a 'earliest latest' -d 'where a new group starts'
complete -c mq-topic -n "$is group" -l pause -x -a forever -d 'hand nothing out until then'
complete -c mq-topic -n "$is group" -l resume -d 'hand out again, at once'
complete -c mq-topic -n "$is group" -l timeout -x -a none -d 'stop a handler that runs longer'
complete -c mq-topic -n "$is group" -l idempotent-by -x -a 'dedup key field: none' -d 'settle an acked business id as a duplicate'
complete -c mq-topic -n "$is group" -l idempotent-window -x -d 'how long an acked business id counts'
complete -c mq-topic -n "$is group" -l rate -x -a none -d 'hand out at most N per duration'
complete -c mq-topic -n "$is group" -l per-key -x -a none -d 'at most N of one key in flight'
complete -c mq-topic -n "$is cancel delay" -s g -l group -x -a "(__mq_groups (__mq_operands $a)[2])" -d 'in this group only'
complete -c mq-topic -n "$is cancel delay" -s k -l key -x -d 'every message of KEY'
complete -c mq-topic -n "$is cancel delay" -l dedup -x -d 'the message of dedup ID'
complete -c mq-topic -n "$is cancel delay" -l dry-run -d 'say what would change'
complete -c mq-topic -n "$is delay" -l at -x -a now -d 'due at TIME'
complete -c mq-topic -n "$is delay" -l delay -x -d 'due DUR from now'
