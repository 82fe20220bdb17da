package event

// Subject is who and what a decision event or an outcome is about: the
// request's client, user and route, the fields both carry alike. It is what
// the rules file's exemptions read, whichever stream the event came from.
type Subject struct {
	UserID   string
	IP       string
	Endpoint string
	Method   string
	Tier     string
}

// Subject returns the decision's subject.
func (d *Decision) Subject() Subject {
	return Subject{UserID: d.UserID, IP: d.IP, Endpoint: d.Endpoint, Method: d.Method, Tier: d.Tier}
}

// Subject returns the outcome's subject.
func (o *Outcome) Subject() Subject {
	return Subject{UserID: o.UserID, IP: o.IP, Endpoint: o.Endpoint, Method: o.Method, Tier: o.Tier}
}
