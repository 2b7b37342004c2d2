package journeyui

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/persistence"
)

// Defaults of Options.
const (
	// DefaultAddr is where `journey ui` listens: loopback only.
	DefaultAddr = "127.0.0.1:8233"
	// DefaultActionWait is how long an action waits for a replica to carry it out before the
	// page shows the request as pending.
	DefaultActionWait = 5 * time.Second
	// DefaultPageSize is the number of executions on a page of the list.
	DefaultPageSize = 50
)

// ErrUnprotected means the dashboard was asked to listen beyond loopback without a token or
// basic auth.
var ErrUnprotected = errors.New("journeyui: refusing to serve a non-loopback address without authentication")

// BasicAuth is a user name and password that a browser asks for.
type BasicAuth struct {
	User, Password string
}

// Options configures the dashboard.
type Options struct {
	// DB is the database that holds journey's tables: a database/sql pool on pgx's stdlib
	// driver. The caller owns it. Required.
	DB *sql.DB
	// Schema holds journey's tables. Default "journey".
	Schema string
	// ReadOnly hides the Retry, Archive and Unarchive buttons, and refuses their POSTs with 403.
	// Default false.
	ReadOnly bool
	// Token, if set, is required of every request: as the cookie that opening any page with
	// ?token=TOKEN sets, or as the header "Authorization: Bearer TOKEN". Default none.
	Token string
	// BasicAuth, if set, is required of every request (either it or Token suffices when both
	// are set). Default none.
	BasicAuth *BasicAuth
	// BasePath is the path under which the handler is mounted, such as "/journey" for
	// http.StripPrefix("/journey", handler): the links of the pages start with it. Default "".
	BasePath string
	// ActionWait is how long an action waits for a replica to carry it out. Default
	// DefaultActionWait.
	ActionWait time.Duration
	// Logger receives the errors that pages show as 500. Default slog.Default().
	Logger *slog.Logger
}

// authenticated reports whether the options require a token or a password.
func (o Options) authenticated() bool { return o.Token != "" || o.BasicAuth != nil }

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// ui is the dashboard's handler.
type ui struct {
	opts   Options
	store  *persistence.Store
	pages  map[string]*template.Template
	secret []byte // signs the CSRF tokens; new at each start
	mux    *http.ServeMux
}

// Cookie names.
const (
	csrfCookie  = "journey_ui_csrf"
	tokenCookie = "journey_ui_token"
)

// Handler returns the dashboard for the schema in opts.DB. It checks that the schema holds
// journey's tables, and says what to do if not.
func Handler(ctx context.Context, opts Options) (http.Handler, error) {
	if opts.DB == nil {
		return nil, errors.New("journeyui: Options.DB is nil: pass a database/sql pool on journey's database")
	}
	if opts.BasicAuth != nil && (opts.BasicAuth.User == "" || opts.BasicAuth.Password == "") {
		return nil, errors.New("journeyui: Options.BasicAuth needs a user and a password")
	}
	opts.Schema = cmp.Or(opts.Schema, "journey")
	opts.ActionWait = cmp.Or(opts.ActionWait, DefaultActionWait)
	opts.BasePath = strings.TrimSuffix(opts.BasePath, "/")
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	store, err := persistence.New(persistence.Config{
		DB: bun.NewDB(opts.DB, pgdialect.New()), Schema: opts.Schema, Logger: opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("journeyui: %w", err)
	}
	if err := store.CheckSchema(ctx); err != nil {
		return nil, fmt.Errorf("journeyui: %w", err)
	}
	u := &ui{opts: opts, store: store, secret: make([]byte, 32), mux: http.NewServeMux()}
	_, _ = rand.Read(u.secret) // never fails
	if u.pages, err = parsePages(opts.BasePath); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static") // the directory is embedded
	u.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	u.mux.HandleFunc("GET /{$}", u.overview)
	u.mux.HandleFunc("GET /executions", u.executions)
	u.mux.HandleFunc("GET /executions/{id}", u.execution)
	u.mux.HandleFunc("GET /replicas", u.replicas)
	u.mux.HandleFunc("GET /schedules", u.schedules)
	u.mux.HandleFunc("GET /reclaims", u.reclaims)
	u.mux.HandleFunc("GET /insights/{graph}", u.insights)
	// Browsers send Sec-Fetch-Site or Origin: a cross-site POST is refused before the CSRF
	// token is looked at.
	actions := http.NewCrossOriginProtection()
	u.mux.Handle("POST /executions/{id}/{action}", actions.Handler(http.HandlerFunc(u.act)))
	u.mux.Handle("POST /executions/retry", actions.Handler(http.HandlerFunc(u.retryMany)))
	return u, nil
}

// ServeHTTP authenticates the request, sets the security headers and serves it.
func (u *ui) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing is fetched from elsewhere, nothing runs, and no other site frames the buttons.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !u.authenticate(w, r) {
		return
	}
	u.mux.ServeHTTP(w, r)
}

// authenticate checks the token or password, if the options require one. A GET with ?token=
// sets the token's cookie and redirects to the same page without it. It reports whether the
// request may go on, having answered it otherwise.
func (u *ui) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if !u.opts.authenticated() {
		return true
	}
	if t := u.opts.Token; t != "" {
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && equal(q, t) {
			http.SetCookie(w, u.cookie(r, tokenCookie, t))
			rest := r.URL.Query()
			rest.Del("token")
			to := *r.URL
			to.RawQuery = rest.Encode()
			http.Redirect(w, r, u.opts.BasePath+to.RequestURI(), http.StatusSeeOther)
			return false
		}
		if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, t) {
			return true
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(bearer, t) {
			return true
		}
	}
	if b := u.opts.BasicAuth; b != nil {
		if user, pass, ok := r.BasicAuth(); ok && equal(user, b.User) && equal(pass, b.Password) {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="journey", charset="UTF-8"`)
	}
	http.Error(w, "Unauthorized: open the dashboard's URL with ?token=TOKEN (journey ui prints it), or sign in.",
		http.StatusUnauthorized)
	return false
}

// equal compares secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// cookie is a cookie of the dashboard: HTTP only, same site only, for its paths.
func (u *ui) cookie(r *http.Request, name, value string) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: cmp.Or(u.opts.BasePath, "/"), HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// csrfToken returns the CSRF token of the forms of a page: the HMAC of the browser's CSRF cookie,
// which it sets if the browser has none. Another site can neither read the token from the page
// nor set the cookie.
func (u *ui) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 64 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		c = u.cookie(r, csrfCookie, hex.EncodeToString(b))
		http.SetCookie(w, c)
	}
	return u.sign(c.Value)
}

func (u *ui) sign(v string) string {
	m := hmac.New(sha256.New, u.secret)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the form's token matches the browser's CSRF cookie.
func (u *ui) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	return err == nil && hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(u.sign(c.Value)))
}

// Server serves the dashboard on a listener.
type Server struct {
	ln  net.Listener
	srv *http.Server
	url string
}

// Listen checks that addr may be served with opts, builds the handler and listens on addr. A
// loopback address (127.0.0.1, ::1, localhost) needs nothing more; any other address needs
// opts.Token or opts.BasicAuth, or Listen returns ErrUnprotected.
func Listen(ctx context.Context, addr string, opts Options) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("journeyui: bad address %q: want host:port, such as %s", addr, DefaultAddr)
	}
	if !isLoopback(host) && !opts.authenticated() {
		return nil, fmt.Errorf("%w: %s is reachable from other machines; set a token (--token or JOURNEY_UI_TOKEN) "+
			"or basic auth (--basic-auth user:password or JOURNEY_UI_BASIC_AUTH), or listen on %s", ErrUnprotected, addr, DefaultAddr)
	}
	h, err := Handler(ctx, opts)
	if err != nil {
		return nil, err
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("journeyui: listening on %s: %w", addr, err)
	}
	s := &Server{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	s.url = "http://" + ln.Addr().String() + strings.TrimSuffix(opts.BasePath, "/") + "/"
	if opts.Token != "" {
		s.url += "?token=" + url.QueryEscape(opts.Token)
	}
	return s, nil
}

// URL is the dashboard's address, with the token if there is one: the link to open.
func (s *Server) URL() string { return s.url }

// Serve serves until ctx ends, then lets the requests under way finish for up to 5 seconds.
func (s *Server) Serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("journeyui: serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("journeyui: shutting down: %w", err)
	}
	return nil
}

// isLoopback reports whether host names only the local machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
