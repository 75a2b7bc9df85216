-- Fixture: the least a hand-over can do, for the hand-off benchmark's floor: replace the key
-- with the one known waiter's value for 500 ms and publish it on the waiter's channel.
-- KEYS[1] lock key; ARGV[1] the waiter's value, ARGV[2] its channel. Reply: PUBLISH's count.
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', 500)
return redis.call('PUBLISH', ARGV[2], ARGV[1])
