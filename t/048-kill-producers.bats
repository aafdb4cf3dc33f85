#!/usr/bin/env bats
# 048-kill-producers.bats: kill -9 producers at random moments.  Every
# offset a producer printed is stored with the body it sent, offsets stay
# dense, the database sound (SPEC 2, Durability: nothing is printed as done
# before it is committed; SPEC 4: no error leaves a partial write).
#
# SLOTS producers run at once, each mq-send a child of one driver shell
# (so a kill only ever reaches a process of ours that has not been
# reaped), in three kinds by slot:
#   one-shot   `mq-send t BODY`, one after the other
#   waiting    a long-lived `mq-send t` reading a fifo from a feeder that
#              writes one line and waits for its offset
#   streaming  the same, fed a line every 10-40ms without waiting
# For CHAOS seconds, at random moments, a random slot's mq-send gets
# SIGKILL and a new producer takes its place (a long-lived one with a new
# fifo and feeder).  Then the feeders stop, every mq-send ends, and the
# checks look at what was printed: a killed producer's unprinted messages
# may or may not be stored.  Bodies are unique, pK-oN (one-shot N of slot
# K) and pK-gG-I (line I fed to generation G of slot K), so a stored body
# names its sender.  The seed is printed; MQ_TEST_SEED=N replays its
# choices (not the timing).

load test_helper

SLOTS=8
CHAOS=12

teardown() {
	kill_bg
}

# save_pids: the driver and the live processes of every slot, for kill_bg.
# Rewritten, not appended: a pid once ours may be someone else's after it
# was reaped.
save_pids() {
	printf '%s\n' "$$" "${pid[@]}" "${fpid[@]}" >"$BATS_TEST_TMPDIR/pids"
}

# feed K G KIND: the feeder of generation G of slot K, until ./stop.
feed() {
	local fd i=0 out
	exec {fd}>"f.$1.$2" || return 1
	while [ ! -e stop ]; do
		i=$((i + 1))
		echo "p$1-g$2-$i" >&"$fd" || return 1
		if [ "$3" = waiting ]; then
			# (mapfile: no fork per look)
			until [ -e stop ] || { mapfile -t out <"o.$1.$2" &&
			    [ "${#out[@]}" -ge "$i" ]; }; do
				sleep 0.01
			done
		else
			sleep "0.0$((RANDOM % 4 + 1))"
		fi
	done
	exec {fd}>&-
}

# slot_start K: a new producer in slot K.
slot_start() {
	local k=$1 g
	g=$((gen[k] + 1))
	gen[k]=$g
	killed[k]=0
	# made here: a producer killed at once never opens its own, and the
	# feeder looks at it
	: >"o.$k.$g"
	if [ "${kind[k]}" = one-shot ]; then
		mq-send t "p$k-o$g" >"o.$k.$g" 2>"e.$k.$g" 3>&- &
		pid[k]=$!
	else
		mkfifo "f.$k.$g"
		mq-send t <"f.$k.$g" >"o.$k.$g" 2>"e.$k.$g" 3>&- &
		pid[k]=$!
		feed "$k" "$g" "${kind[k]}" 2>>feed.err 3>&- &
		fpid[k]=$!
	fi
	producers=$((producers + 1))
	save_pids
}

# slot_end K: reaps the producer of slot K, which is gone or to be killed
# (killed[K] = 1), and notes what it printed.  Killing and reaping with
# stderr closed: bash says nothing of a job it killed.
slot_end() {
	local k=$1
	local g=${gen[k]} st=0
	{
		if [ "${killed[k]}" = 1 ]; then
			kill -9 "${pid[k]}" || true
		fi
		wait "${pid[k]}" || st=$?
	} 2>/dev/null
	if [ "${kind[k]}" != one-shot ]; then
		{ kill -9 "${fpid[k]}"; wait "${fpid[k]}"; } 2>/dev/null || true
	fi
	if [ "${killed[k]}" = 1 ] && [ "$st" = 137 ]; then
		hits=$((hits + 1))
	elif [ "$st" != 0 ]; then
		echo "slot $k producer $g (${kind[k]}) ended with $st" >>unexpected
	elif [ "${kind[k]}" != one-shot ] && [ ! -e stop ]; then
		echo "slot $k producer $g (${kind[k]}) ended by itself" >>unexpected
	fi
	if [ -s "e.$k.$g" ]; then
		echo "slot $k producer $g said: $(head -3 "e.$k.$g")" >>unexpected
	fi
	# one awk, not a loop: bats traces every shell command, slowly
	awk -v kind="${kind[k]}" -v k="$k" -v g="$g" '
	    { who = "slot " k " producer " g }
	    !/^[0-9]+$/ { print who " printed \"" $0 "\"" >>"unexpected"; next }
	    kind == "one-shot" && NR > 1 {
		print who " printed more than one offset" >>"unexpected"
	    }
	    kind == "one-shot" { print $0 "\tp" k "-o" g >>"printed"; next }
	    { print $0 "\tp" k "-g" g "-" NR >>"printed" }
	    ' "o.$k.$g"
	if [ -n "$(tail -c 1 "o.$k.$g")" ]; then
		echo "slot $k producer $g printed a partial line" >>unexpected
	fi
}

# kill_slot K: SIGKILL the producer of slot K (a one-shot one that is done
# is replaced first, and killed a moment later), and replace it.
kill_slot() {
	local k=$1
	if [ "${kind[k]}" = one-shot ] && gone "${pid[k]}"; then
		slot_end "$k"
		slot_start "$k"
		sleep "0.00$((RANDOM % 10))"
	fi
	killed[k]=1
	kills=$((kills + 1))
	slot_end "$k"
	slot_start "$k"
}

# drive SLOTS CHAOS SEED: starts the producers, kills and replaces them for
# CHAOS seconds, stops them; counts in drive.stats.  Run by a bash of its
# own (bats traces every command of a test, which would slow the loop
# tenfold), the parent of every producer and feeder.
drive() {
	local k now stop_at next_kill ticks=0
	SLOTS=$1 CHAOS=$2 RANDOM=$3
	kind=() pid=() fpid=() gen=() killed=()
	kills=0 hits=0 producers=0
	for ((k = 0; k < SLOTS; k++)); do
		case $((k % 3)) in
		0) kind[k]=one-shot ;;
		1) kind[k]=waiting ;;
		2) kind[k]=streaming ;;
		esac
		gen[k]=0
		slot_start "$k"
	done

	# a kill every 50-400ms (times in microseconds)
	now=${EPOCHREALTIME//[!0-9]/}
	stop_at=$((now + CHAOS * 1000000))
	next_kill=$((now + 50000 + RANDOM % 350 * 1000))
	while [ "$now" -lt "$stop_at" ]; do
		ticks=$((ticks + 1))
		for ((k = 0; k < SLOTS; k++)); do
			if gone "${pid[k]}"; then
				slot_end "$k"
				slot_start "$k"
			fi
		done
		if [ "$now" -ge "$next_kill" ]; then
			kill_slot $((RANDOM % SLOTS))
			next_kill=$((${EPOCHREALTIME//[!0-9]/} + 50000 + RANDOM % 350 * 1000))
		fi
		sleep 0.01
		now=${EPOCHREALTIME//[!0-9]/}
	done

	# the end: feeders close their fifos, every mq-send finishes
	touch stop
	for ((k = 0; k < SLOTS; k++)); do
		if ! wait_for 60 gone "${pid[k]}"; then
			echo "slot $k producer ${gen[k]} still running 60s after the stop" >>unexpected
			killed[k]=1
		fi
		slot_end "$k"
	done
	pid=() fpid=()
	save_pids
	echo "$kills $hits $producers $ticks" >drive.stats
}

@test "kill -9 of producers at random moments: every printed offset stored, offsets dense" {
	SEED=${MQ_TEST_SEED:-$RANDOM}
	mq-topic create t >/dev/null
	: >printed
	: >unexpected
	bash -c "$(declare -f gone wait_for save_pids feed slot_start slot_end \
	    kill_slot drive); drive $SLOTS $CHAOS $SEED" >drive.out 2>&1 3>&- &
	driver=$!
	finish "$driver" $((CHAOS + 180)) || fail "still killing after $((CHAOS + 180))s (seed $SEED)"
	: >"$BATS_TEST_TMPDIR/pids"	# all gone: none to kill in teardown
	[ "$ST" = 0 ] || fail "the driver ended with $ST: $(head -5 drive.out) (seed $SEED)"
	[ ! -s drive.out ] || fail "the driver said: $(head -5 drive.out) (seed $SEED)"
	read -r kills hits producers ticks <drive.stats

	run -0 sql 'SELECT count(*) FROM msg'
	stored=$output
	echo "# seed $SEED: $kills kills ($hits of a running mq-send)," \
	    "$producers producers, $ticks ticks, $(wc -l <printed) offsets printed," \
	    "$stored messages stored ($((stored - $(wc -l <printed))) never printed)" >&3
	[ ! -s unexpected ] || fail "$(head -10 unexpected) (seed $SEED)"
	[ ! -s feed.err ] || fail "feeders said: $(head -3 feed.err) (seed $SEED)"
	[ "$hits" -gt 0 ] || fail "no kill hit a running mq-send (seed $SEED)"
	[ -s printed ] || fail "no offset was printed (seed $SEED)"

	# every offset printed once, to one producer
	run -0 bash -c "cut -f1 printed | sort | uniq -d"
	[ -z "$output" ] || fail "offsets printed twice: $(echo "$output" | head -5 | xargs) (seed $SEED)"
	# every printed offset stored with the body its producer sent
	sql "SELECT off, $(txt body) FROM msg
	    WHERE topic = (SELECT id FROM topic WHERE name = 't')" | tr '|' '\t' |
	    sort >stored.tsv
	sort printed >printed.sorted
	comm -23 printed.sorted stored.tsv >missing
	if [ -s missing ]; then
		while IFS=$'\t' read -r off body; do
			echo "offset $off printed for $body: stored as" \
			    "'$(sql "SELECT $(txt body) FROM msg WHERE off = $off")'"
		done <missing | head -10 >missing.why
		fail "$(wc -l <missing) printed offsets not stored with their body:
$(cat missing.why) (seed $SEED)"
	fi
	# dense, each body once, nothing but what producers sent
	run -0 sql 'SELECT min(off), max(off), count(*) FROM msg'
	assert_output "1|$stored|$stored"
	run -0 sql 'SELECT count(DISTINCT body) FROM msg'
	assert_output "$stored"
	run -1 grep -vE $'^[0-9]+\tp[0-9]+-(o[0-9]+|g[0-9]+-[0-9]+)$' stored.tsv
	db_intact
	# and the topic goes on where it stopped
	run -0 mq-send t after
	assert_output $((stored + 1))
}
