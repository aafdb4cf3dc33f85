# bash completion for mq: mq-send mq-recv mq-ack mq-replay mq-lag mq-purge
# mq-topic.  One function for all seven, switching on the command name;
# `make install` puts this file in place as mq-send and links the others
# to it.  Topic and group names are read with `mq-topic list` and
# `mq-topic show`, from the database named on the command line (-d, --db)
# or the default one; when that fails, names are not completed.

# _mq_db: the -d/--db arguments of the command line, for mq-topic.
_mq_db() {
	local i w
	_mq_dbargs=()
	for ((i = 1; i < ${#_mq_words[@]}; i++)); do
		w=${_mq_words[i]}
		case $w in
		--) break ;;
		-d|--db) _mq_dbargs=(-d "${_mq_words[i+1]}"); ((i++)) ;;
		--db=*) _mq_dbargs=(-d "${w#--db=}") ;;
		-d?*) _mq_dbargs=(-d "${w#-d}") ;;
		esac
	done
	# as the shell will read it: quotes and backslashes undone
	w=${_mq_dbargs[1]}
	case $w in
	\'*\') w=${w:1:${#w}-2} ;;
	\"*\") w=${w:1:${#w}-2}; w=${w//\\\"/\"} ;;
	*) w=$(printf '%s' "$w" | sed 's/\\\(.\)/\1/g') ;;
	esac
	[[ ${#_mq_dbargs[@]} -gt 1 ]] && _mq_dbargs[1]=$w
	if [[ ${_mq_dbargs[1]} == "~/"* ]]; then
		_mq_dbargs[1]=$HOME/${_mq_dbargs[1]#"~/"}
	fi
}

_mq_topics() {
	_mq_db
	mq-topic "${_mq_dbargs[@]}" list 2>/dev/null
}

# _mq_groups [TOPIC]: the groups of TOPIC, or of every topic.
_mq_groups() {
	local t topics
	_mq_db
	if [[ $1 ]]; then
		topics=$1
	else
		topics=$(mq-topic "${_mq_dbargs[@]}" list 2>/dev/null)
	fi
	for t in $topics; do
		mq-topic "${_mq_dbargs[@]}" show "$t" 2>/dev/null |
		    sed -n 's/^group \([^:]*\):.*/\1/p'
	done | sort -u
}

# _mq_reply WORDS: the words that start with $cur (names hold no blanks)
_mq_reply() {
	COMPREPLY=($(compgen -W "$1" -- "$cur"))
}

_mq_files() {
	if declare -F _filedir >/dev/null; then
		_filedir
	else
		local IFS=$'\n'
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}

_mq() {
	local cmd=${1##*/} cur prev words cword split
	local argopts opts i w npos=0 dashdash=0 sub= topic=
	local -a pos

	if declare -F _init_completion >/dev/null; then
		_init_completion -s || return
	else
		# no bash-completion: join "--opt" "=" "value" back together
		words=() cword=0
		for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
			w=${COMP_WORDS[i]}
			if [[ $w == = && ${#words[@]} -gt 0 && ${words[-1]} == -* ]]; then
				words[-1]+="="
				if ((i + 1 < ${#COMP_WORDS[@]})) && ((i + 1 <= COMP_CWORD)); then
					((i++))
					words[-1]+=${COMP_WORDS[i]}
				fi
			else
				words+=("$w")
			fi
			((i <= COMP_CWORD)) && cword=$((${#words[@]} - 1))
		done
		cur=${words[cword]}
		prev=${words[cword-1]}
		if [[ $cur == --*=* ]]; then
			prev=${cur%%=*}
			cur=${cur#*=}
			split=true
		fi
	fi
	_mq_words=("${words[@]}")

	case $cmd in
	mq-send)
		argopts='-d --db -H --header -k --key --delay --at --linger --dedup
		    --dedup-field --ttl --from-outbox'
		opts='-0 -d -e -f -H -h -k -q -V --null --db --escapes --follow
		    --header --help --key --quiet --version --whole --delay --at
		    --linger --dedup --dedup-field --replace --ttl --from-outbox' ;;
	mq-recv)
		argopts='-d --db -g --group -j --jobs -n --count -w --wait --lease
		    --format --from --timeout --max-time'
		opts='-0 -A -d -f -g -h -j -n -v -V -w --null --auto-ack --db
		    --follow --group --help --jobs --count --version --wait
		    --lease --json --format --from --timeout --max-time
		    --empty-ok --fair --verbose' ;;
	mq-ack)
		argopts='-d --db --extend --delay --reason'
		opts='-d -h -V --db --fail --dead --extend --delay --reason
		    --help --version' ;;
	mq-replay)
		argopts='-d --db -g --group -H --header -k --key -n --count
		    --from-offset --to-offset --since --until --format --shift
		    --offset --trace'
		opts='-0 -d -f -g -H -h -k -n -V --null --db --follow --group
		    --header --key --count --from-offset --to-offset --since --until --json
		    --format --earliest --latest --shift --dead --offset
		    --dry-run --trace --help --version' ;;
	mq-lag)
		argopts='-d --db --max-lag --max-age --max-dead --max-expired
		    --max-silence --max-idle --state -k --key -n --from-offset
		    --to-offset'
		opts='-d -h -k -n -q -V --db --json --prometheus --topics
		    --consumers --max-lag --max-age --max-dead --max-expired
		    --max-silence --max-idle --watch --quiet --wide --messages
		    --state --key --from-offset --to-offset --help --version' ;;
	mq-purge)
		argopts='-d --db -g --group --older-than --before-offset'
		opts='-d -f -g -h -n -q -V --db --older-than --before-offset
		    --force --dead --group --vacuum --dry-run --quiet --help
		    --version' ;;
	mq-topic)
		argopts='-d --db --lease --max-attempts --backoff --from --pause
		    --timeout --idempotent-by --idempotent-window --rate --per-key
		    -g --group -k --key --dedup --at --delay'
		opts='-d -f -h -V --db --force --help --version' ;;
	*)
		return ;;
	esac
	argopts=" $(echo $argopts) "

	# the operands before the word being completed
	for ((i = 1; i < cword; i++)); do
		w=${words[i]}
		if ((dashdash)); then
			pos+=("$w")
		elif [[ $w == -- ]]; then
			dashdash=1
			[[ $cmd == mq-recv ]] && break
		elif [[ $cmd == mq-lag && $w == --watch ]]; then
			# --watch 5s: the interval may be the next word
			[[ ${words[i+1]} =~ ^([0-9]+(ms|s|m|h|d|w))*[0-9]+(ms|s|m|h|d|w)?$ ]] &&
			    ((i + 1 < cword)) && ((i++))
		elif [[ $w == -* ]]; then
			[[ $w != *=* && $argopts == *" $w "* ]] && ((i++))
		else
			pos+=("$w")
		fi
	done
	npos=${#pos[@]}

	# mq-recv TOPIC -- COMMAND ...: complete the command and its arguments
	if [[ $cmd == mq-recv ]] && ((dashdash)); then
		for ((i = 1; i < COMP_CWORD; i++)); do
			[[ ${COMP_WORDS[i]} == -- ]] && break
		done
		if declare -F _command_offset >/dev/null; then
			_command_offset $((i + 1))
		elif ((COMP_CWORD == i + 1)); then
			COMPREPLY=($(compgen -c -- "$cur"))
		else
			_mq_files
		fi
		return
	fi

	# option arguments
	case $prev in
	-d|--db|--from-outbox)
		_mq_files
		return ;;
	-g|--group)
		case $cmd in
		mq-recv|mq-replay|mq-purge) _mq_reply "$(_mq_groups "${pos[0]}")" ;;
		mq-topic) _mq_reply "$(_mq_groups "${pos[1]}")" ;;
		esac
		return ;;
	--idempotent-by)
		_mq_reply 'dedup key field: none'
		return ;;
	--from)
		_mq_reply 'earliest latest'
		return ;;
	--max-lag|--max-age|--max-dead|--max-expired|--max-idle)
		# [[TOPIC/]GROUP=]: the groups, and each as TOPIC/GROUP
		local t g tg=
		for t in $(_mq_topics); do
			for g in $(_mq_groups "$t"); do
				tg="$tg $g= $t/$g="
			done
		done
		_mq_reply "$tg"
		compopt -o nospace 2>/dev/null
		return ;;
	--max-silence)
		_mq_reply "$(_mq_topics | sed 's/$/=/')"
		compopt -o nospace 2>/dev/null
		return ;;
	esac
	[[ $argopts == *" $prev "* ]] && return
	[[ $split == true ]] && return

	if [[ $cmd == mq-topic ]]; then
		sub=${pos[0]}
		topic=${pos[1]}
		case $sub in
		'')
			if [[ $cur == -* ]]; then
				_mq_reply "$opts"
			else
				_mq_reply 'create list show set delete group group-delete
				    cancel delay backup outbox-init'
			fi ;;
		backup|outbox-init)
			((npos == 1)) && _mq_files ;;
		cancel|delay)
			if [[ $cur == -* ]]; then
				w='-f -g -k --force --group --key --dedup --dry-run'
				[[ $sub == delay ]] && w="$w --at --delay"
				_mq_reply "$w"
			elif ((npos == 1)); then
				_mq_reply "$(_mq_topics)"
			fi ;;
		show|delete)
			# --force (-f) may come anywhere after delete
			if [[ $cur == -* ]]; then
				[[ $sub == delete ]] && _mq_reply '--force -f'
			elif ((npos == 1)); then
				_mq_reply "$(_mq_topics)"
			fi ;;
		group|group-delete)
			if [[ $cur == -* ]]; then
				if [[ $sub == group ]]; then
					_mq_reply '--lease --max-attempts --backoff
					    --ordered --unordered --from --pause
					    --resume --timeout --idempotent-by
					    --idempotent-window --rate --per-key'
				else
					_mq_reply '--force -f'
				fi
			elif ((npos == 1)); then
				_mq_reply "$(_mq_topics)"
			elif ((npos == 2)); then
				_mq_reply "$(_mq_groups "$topic")"
			fi ;;
		create|set)
			if ((npos == 1)); then
				[[ $sub == set ]] && _mq_reply "$(_mq_topics)"
			elif [[ ${COMP_WORDS[COMP_CWORD-1]} == = &&
			    ${COMP_WORDS[COMP_CWORD-2]} == retention ]] ||
			    [[ ${COMP_WORDS[COMP_CWORD]} == = &&
			    ${COMP_WORDS[COMP_CWORD-1]} == retention ]]; then
				cur=${COMP_WORDS[COMP_CWORD]}
				[[ $cur == = ]] && cur=
				_mq_reply 'none'
			elif [[ $cur != *=* && ${COMP_WORDS[COMP_CWORD]} != = &&
			    ${COMP_WORDS[COMP_CWORD-1]} != = ]]; then
				_mq_reply 'retention= dedup-window= max-size= paused= ttl='
				compopt -o nospace 2>/dev/null
			fi ;;
		esac
		return
	fi

	if [[ $cur == -* ]]; then
		_mq_reply "$opts"
		[[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == --watch ]] &&
		    COMPREPLY=(--watch --watch=)
		return
	fi
	case $cmd in
	mq-send|mq-recv|mq-replay|mq-purge)
		((npos == 0)) && _mq_reply "$(_mq_topics)"
		# mq-recv TOPIC ... --: more topics (lanes), or the command
		[[ $cmd == mq-recv ]] && ((npos >= 1)) &&
		    _mq_reply "$(_mq_topics) --" ;;
	mq-lag)
		if ((npos == 0)); then
			_mq_reply "$(_mq_topics)"
		elif ((npos == 1)); then
			_mq_reply "$(_mq_groups "${pos[0]}")"
		fi ;;
	esac
}

complete -F _mq mq-send mq-recv mq-ack mq-replay mq-lag mq-purge mq-topic
