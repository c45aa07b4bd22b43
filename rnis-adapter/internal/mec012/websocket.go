package mec012

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Websocket delivery of notifications (MEC 012 v2.2.1 WebsockNotifConfig, MEC 009 clause
// 6.12a): a subscription created with "websockNotifConfig": {"requestWebsocketUri": true}
// is answered with a websocketUri of this RNIS; the consumer opens it (GET with the same
// bearer token as the subscription's creator: deny by default) and receives each
// notification as one text message, the same JSON body an HTTP POST would carry. While no
// websocket is open, notifications are not delivered (counted as failed): MEC 009 gives the
// producer no obligation to hold them.

// websocketPath is where a subscription's websocket is served, under Base.
const websocketPath = "/websockets/"

// websocketURI is the websocketUri of subscription id: the public URL with ws or wss.
func websocketURI(publicURL, id string) string {
	base := publicURL
	switch {
	case strings.HasPrefix(base, "https://"):
		base = "wss://" + strings.TrimPrefix(base, "https://")
	case strings.HasPrefix(base, "http://"):
		base = "ws://" + strings.TrimPrefix(base, "http://")
	}
	return base + Base + websocketPath + id
}

// sockets holds the open websocket of each subscription (at most one: a new one replaces
// the old, which is closed).
type sockets struct {
	mu    sync.Mutex
	conns map[string]*socket
}

type socket struct {
	mu   sync.Mutex // one writer at a time (gorilla/websocket allows no concurrent writes)
	conn *websocket.Conn
}

func newSockets() *sockets { return &sockets{conns: map[string]*socket{}} }

var upgrader = websocket.Upgrader{
	HandshakeTimeout: 5 * time.Second,
	// The bearer token, not a cookie, authorizes the upgrade, so a page of another origin
	// cannot ride on a user's session: any origin may connect with a valid token.
	CheckOrigin: func(*http.Request) bool { return true },
}

// errNoSocket: the subscription's consumer has no websocket open.
var errNoSocket = errors.New("no websocket is open for this subscription")

// send writes one notification to subscription id's websocket within timeout; a socket
// that fails is closed and forgotten.
func (ss *sockets) send(id string, body []byte, timeout time.Duration) error {
	ss.mu.Lock()
	s := ss.conns[id]
	ss.mu.Unlock()
	if s == nil {
		return errNoSocket
	}
	s.mu.Lock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(timeout))
	err := s.conn.WriteMessage(websocket.TextMessage, body)
	s.mu.Unlock()
	if err != nil {
		ss.drop(id, s)
	}
	return err
}

// close ends subscription id's websocket, if open (the subscription was deleted or expired).
func (ss *sockets) close(id string) {
	ss.mu.Lock()
	s := ss.conns[id]
	ss.mu.Unlock()
	if s != nil {
		ss.drop(id, s)
	}
}

// forget removes s if it is still id's socket (a newer one may have replaced it).
func (ss *sockets) forget(id string, s *socket) {
	ss.mu.Lock()
	if ss.conns[id] == s {
		delete(ss.conns, id)
	}
	ss.mu.Unlock()
}

// drop closes s with a normal closure and forgets it.
func (ss *sockets) drop(id string, s *socket) {
	ss.forget(id, s)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	_ = s.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	_ = s.conn.Close()
}

// open registers conn as subscription id's websocket, closing the one it replaces.
func (ss *sockets) open(id string, conn *websocket.Conn) *socket {
	s := &socket{conn: conn}
	ss.mu.Lock()
	old := ss.conns[id]
	ss.conns[id] = s
	ss.mu.Unlock()
	if old != nil {
		ss.drop(id, old)
	}
	return s
}

// serveWebsocket upgrades GET /websockets/{subscriptionId}: the subscription must exist, ask for
// websocket delivery and be reachable by the caller (reachable: 403 for another app's).
func (s *Server) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("subscriptionId")
	sub, ok := s.reachable(w, r, id)
	if !ok {
		return
	}
	if !sub.Websocket {
		problem(w, r, http.StatusConflict, "subscription "+id+" delivers to its callbackReference, not over a websocket")
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		problem(w, r, http.StatusBadRequest, "a websocket upgrade (RFC 6455) is required here")
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil) // answers the handshake's errors itself
	if err != nil {
		return
	}
	sock := s.sockets.open(id, conn)
	s.log.Info("websocket opened", "subscription", id)
	if sub.Body["requestTestNotification"] == true {
		s.notifier.test(sub) // the test of the channel asked for: on every opening of it
	}
	// Read until the consumer closes: this answers pings and close frames; anything the
	// consumer sends is ignored (MEC 009 defines no messages from it).
	_ = conn.SetReadDeadline(time.Time{})
	conn.SetReadLimit(4096)
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			s.sockets.forget(id, sock)
			_ = conn.Close()
			s.log.Info("websocket closed", "subscription", id)
			return
		}
	}
}
