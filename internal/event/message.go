package event

import "time"

// Message is what the services that consume the topics see of a message:
// where it sits in its topic and its bytes. kafkabus hands batches of them
// to its handlers, so the detector and the archiver import no Kafka client.
type Message struct {
	Topic     string
	Partition int
	Offset    int64
	// Time is the message's timestamp (the producer's, or the broker's).
	Time time.Time
	// Value is the message's bytes as the client read them, not a copy.
	Value []byte
}
