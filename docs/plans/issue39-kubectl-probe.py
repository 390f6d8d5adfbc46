"""Probe: what kubectl sends to an API server (issue 39 planning, 2026-12-05).

A logging fake on http://127.0.0.1:18080 that answers aggregated discovery (pods, namespaces, configmaps, events,
gpuclaims, virtualmachines), /openapi/v3 with per-GV docs whose PATCH ops carry the GVK extension and a
fieldValidation parameter, stores what is POSTed, and on a watch sends initial events + the initial-events-end
bookmark (sendInitialEvents) and, on the first watch only, a 410 ERROR event.

Run:  python3 issue39-kubectl-probe.py 2>requests.log &
      a kubeconfig with server http://127.0.0.1:18080 and any token; then e.g. `kubectl get pods -w`,
      `kubectl apply -f x.yaml` (twice), `kubectl wait --for=jsonpath=... pod/p1 --timeout=7s`; read requests.log.
Not part of the product; for looking at client behaviour only.
"""
import http.server, json, sys, threading, time, urllib.parse
RV=[100]
CNT=[0]
store={}  # path -> obj
def res(name, kind, scope, sub=(), short=()):
    r={"resource":name,"responseKind":{"group":"","version":"","kind":kind},"scope":scope,"singularResource":kind.lower(),
       "verbs":["create","delete","get","list","patch","update","watch"]}
    if short: r["shortNames"]=list(short)
    if sub: r["subresources"]=[{"subresource":s,"responseKind":{"group":"","version":"","kind":kind},"verbs":["get","patch","update"]} for s in sub]
    return r
CORE={"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"creationTimestamp":None},"versions":[{"version":"v1","resources":[
  res("pods","Pod","Namespaced",("status",),("po",)), res("namespaces","Namespace","Cluster",(),("ns",)), res("configmaps","ConfigMap","Namespaced",(),("cm",)), res("events","Event","Namespaced",(),("ev",))],"freshness":"Current"}]}]}
APIS={"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
 {"metadata":{"name":"gpu.cozystack.io","creationTimestamp":None},"versions":[{"version":"v1alpha1","resources":[res("gpuclaims","GPUClaim","Namespaced",("status",))],"freshness":"Current"}]},
 {"metadata":{"name":"kubevirt.io","creationTimestamp":None},"versions":[{"version":"v1","resources":[res("virtualmachines","VirtualMachine","Namespaced",("status",),("vm",))],"freshness":"Current"}]}]}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version="HTTP/1.1"
    def send(self, code, obj, ctype="application/json"):
        b=json.dumps(obj).encode(); self.send_response(code); self.send_header('Content-Type',ctype); self.send_header('Content-Length',str(len(b))); self.end_headers(); self.wfile.write(b)
    def _h(self):
        n=int(self.headers.get('Content-Length') or 0); body=self.rfile.read(n) if n else b''
        u=urllib.parse.urlparse(self.path); p=u.path; q=urllib.parse.parse_qs(u.query)
        sys.stderr.write("REQ %s %s\n  Accept: %s\n  Content-Type: %s\n  body: %s\n"%(self.command,self.path,self.headers.get('Accept'),self.headers.get('Content-Type'),body[:1500].decode(errors='replace')))
        acc=self.headers.get('Accept') or ''
        if p in('/api','/apis'):
            if 'APIGroupDiscoveryList' in acc:
                return self.send(200, CORE if p=='/api' else APIS, 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList')
            return self.send(404,{})
        if p=='/openapi/v3': return self.send(200,{'paths':{'api/v1':{'serverRelativeURL':'/openapi/v3/api/v1?hash=A'},'apis/kubevirt.io/v1':{'serverRelativeURL':'/openapi/v3/apis/kubevirt.io/v1?hash=B'}}})
        if p.startswith('/openapi/v3/'):
            gv=p[len('/openapi/v3/'):]
            kinds={'api/v1':[('','v1','ConfigMap','/api/v1/namespaces/{namespace}/configmaps/{name}'),('','v1','Namespace','/api/v1/namespaces/{name}'),('','v1','Pod','/api/v1/namespaces/{namespace}/pods/{name}')],'apis/kubevirt.io/v1':[('kubevirt.io','v1','VirtualMachine','/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}')]}[gv]
            paths={}
            for g,v,k,path in kinds:
                paths[path]={'patch':{'x-kubernetes-group-version-kind':{'group':g,'version':v,'kind':k},'parameters':[{'name':'fieldValidation','in':'query','schema':{'type':'string'}}],'responses':{}}}
            return self.send(200,{'openapi':'3.0.0','info':{'title':'Kubernetes','version':'v1.37.0'},'paths':paths,'components':{'schemas':{}}}, 'application/json')
        if p=='/version': return self.send(200,{"major":"1","minor":"37","gitVersion":"v1.37.0"})
        parts=p.strip('/').split('/')
        if self.command=='GET':
            if 'watch' in q:
                self.send_response(200); self.send_header('Content-Type','application/json'); self.send_header('Transfer-Encoding','chunked'); self.end_headers()
                
                def w(o):
                    ev=json.dumps(o).encode()+b'\n'; self.wfile.write(b'%x\r\n'%len(ev)+ev+b'\r\n'); self.wfile.flush()
                CNT[0]+=1
                if 'sendInitialEvents' in q:
                    for k,o in list(store.items()):
                        if '/pods/' in k: w({'type':'ADDED','object':o})
                    w({'type':'BOOKMARK','object':{'kind':'Pod','apiVersion':'v1','metadata':{'resourceVersion':str(RV[0]),'annotations':{'k8s.io/initial-events-end':'true'}}}})
                time.sleep(1.5)
                if CNT[0]==1: w({'type':'ERROR','object':{'kind':'Status','apiVersion':'v1','metadata':{},'status':'Failure','message':'too old resource version: 1 (100)','reason':'Expired','code':410}})
                else: time.sleep(3)
                self.wfile.write(b'0\r\n\r\n'); return
            if p in store: return self.send(200, store[p])
            # list
            items=[o for k,o in store.items() if k.startswith(p+'/') and k.count('/')==p.count('/')+1]
            if len(parts) in (3,5) or (parts[0]=='apis' and len(parts) in (4,6)):
                return self.send(200,{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":str(RV[0])},"items":items})
            return self.send(404,{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not found"})
        if self.command=='POST':
            o=json.loads(body); RV[0]+=1; o.setdefault('metadata',{})['resourceVersion']=str(RV[0]); o['metadata']['uid']='u%d'%RV[0]
            store[p+'/'+o['metadata']['name']]=o; return self.send(201,o)
        if self.command=='PATCH':
            if p not in store: return self.send(404,{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"nf"})
            return self.send(200, store[p])
        if self.command=='DELETE':
            o=store.pop(p,None)
            return self.send(200, o or {})
        self.send(405,{})
    do_GET=do_POST=do_PUT=do_PATCH=do_DELETE=_h
    def log_message(self,*a): pass
http.server.ThreadingHTTPServer(('127.0.0.1',18080),H).serve_forever()
